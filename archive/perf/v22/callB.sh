#!/bin/bash
# v22 call B (4 GPUs): call A again without `hop` (call A ran it; its
# prefetching calls failed on the four-buffer bound of `CallBuffers`, now
# five). The L2 prefetch build (NOTE [l2 prefetch]):
#   1. `intranode-bench hop`, first run (docs/perf/queue/hop_w4.sh: hop at
#      4 and 2, the Lamport forms 1 KiB-4 MiB beside NCCL);
#   2. `intranode-suite check --only-norm` at world 4 (every other call
#      prefetches; the outputs are checked bit for bit as before);
#   3. decode at TP4: none, nccl, ours, fused, fused-prefetch (default 16
#      blocks, 8 MiB); then two other prefetch settings (32 blocks x 16
#      MiB, 4 blocks x 4 MiB) and the default again, each with none and
#      fused beside it.
# Prediction (archive/perf/v22/NOTES.md): fused-prefetch 1-2 us/layer under
# fused for llama3-8b at batch 1-8; none unchanged.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22b && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
{
echo "== norm check, world 4 ($SECONDS s)"
INTRANODE_REQUIRE_GPUS=4 timeout 120 $D/intranode-run --nproc-per-node 4 --timeout 110 -- \
    $D/intranode-suite check --only-norm >$OUT/check_norm_w4.log 2>&1
echo "rc=$? ($SECONDS s)"; tail -3 $OUT/check_norm_w4.log
dec() { # name env variants
    local name=$1 env=$2 variants=$3
    env $env timeout 150 $D/intranode-run --nproc-per-node 4 --timeout 140 -- \
        $D/intranode-bench decode --batches 1,8,64 --variants $variants --out $D/$name \
        >$OUT/$name.log 2>&1
    echo "== $name [$env] rc=$? ($SECONDS s)"
    grep -E "^\| llama" $D/$name/decode_w4.md | awk -F'|' '{printf "%-10s %3s %-15s %7s %7s %7s %s\n",$2,$3,$4,$6,$7,$9,substr($12,1,40)}'
}
dec dec_default INTRANODE_L2_PREFETCH= none,nccl,ours,fused,fused-prefetch
dec dec_b32_16m INTRANODE_L2_PREFETCH=blocks=32,bytes=16777216 none,fused,fused-prefetch
dec dec_b4_4m INTRANODE_L2_PREFETCH=blocks=4,bytes=4194304 none,fused,fused-prefetch
dec dec_default2 INTRANODE_L2_PREFETCH= none,fused,fused-prefetch
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary_b.txt
