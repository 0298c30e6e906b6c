#!/bin/bash
# v22 call D (4 GPUs): the L2 prefetch with spread pieces (`spread=1`) and
# the default now 8 blocks x 8 MiB (call C's best):
#   1. decode sweep at TP4, none / fused / fused-prefetch, both models,
#      batch 1, 8, 64, six settings, two turns;
#   2. decode at TP4 with cudarc's defaults (event tracking on), every
#      variant, the default setting; then TP2 on GPUs 0,1;
#   3. `check --only-norm` at world 4; GPU tests and examples with
#      cudarc's defaults.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22d && mkdir -p $D
for f in bundle/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
{
for turn in 1 2; do
for s in blocks=8,bytes=8388608 blocks=8,bytes=8388608,spread=1 blocks=12,bytes=8388608,spread=1 \
         blocks=8,bytes=12582912,spread=1 blocks=8,bytes=6291456,spread=1 blocks=16,bytes=8388608,spread=1; do
    n=$(echo $s | tr '=,' '__')
    INTRANODE_L2_PREFETCH=$s timeout 60 $D/intranode-run --nproc-per-node 4 --timeout 55 -- \
        $D/intranode-bench decode --batches 1,8,64 --variants none,fused,fused-prefetch --check false \
        --out $D/o >$D/sweep_${turn}_$n.log 2>&1
    echo "== turn $turn $s rc=$? ($SECONDS s)"
    grep -E "^\| llama" $D/o/decode_w4.md | awk -F'|' '$4 ~ /fused/ {printf "%s b%s %s %s;", substr($2,8,3), $3+0, $4 ~ /prefetch/ ? "P" : "F", $9+0}'; echo
done
done
for w in 4 2; do
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 100 $D/intranode-run --nproc-per-node $w --timeout 95 -- \
        $D/intranode-bench decode --batches 1,8,64 --variants none,nccl,ours,fused,fused-prefetch \
        --cudarc-defaults --out $D/dec$w >$OUT/decode_w$w.log 2>&1
    echo "== decode, world $w, cudarc defaults rc=$? ($SECONDS s)"
    cp $D/dec$w/decode_w$w.md $OUT/ 2>/dev/null
    grep -E "^\| llama" $D/dec$w/decode_w$w.md | awk -F'|' '{printf "%-10s %3s %-15s %7s %7s %7s %s\n",$2,$3,$4,$6,$7,$9,substr($12,1,40)}'
done
INTRANODE_REQUIRE_GPUS=4 timeout 120 $D/intranode-run --nproc-per-node 4 --timeout 110 -- \
    $D/intranode-suite check --only-norm >$D/check_norm_w4.log 2>&1
echo "== norm check, world 4 rc=$? ($SECONDS s)"; grep "check rank" $D/check_norm_w4.log
export INTRANODE_REQUIRE_GPUS=4 INTRANODE_TEST_BIN_DIR=$D
for t in test-intranode test-ptx_scopes test-intranode_examples; do
    (cd $D && timeout 150 ./$t --test-threads=1) >$D/$t.log 2>&1
    echo "== $t rc=$? ($SECONDS s): $(grep -E '^test result' $D/$t.log | tail -1)"
    grep -E "FAILED|panicked|SKIPPED" $D/$t.log | head -3
done
for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
    timeout 60 $D/intranode-run --timeout 55 --nproc-per-node 4 -- $D/$e >$D/$e.log 2>&1
    echo "== $e rc=$? ($SECONDS s)"
    tail -1 $D/$e.log | cut -c1-200
done
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary_d.txt
tar czf $OUT/logs_d.tgz -C $D $(cd $D && ls *.log)
