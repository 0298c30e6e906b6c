#!/bin/bash
# v22 call H (4 GPUs), the final tree: `faults-suite --only lamport` at
# world 4 (the Lamport forms' faults after NOTE [call count]: a skipped
# call, a late rank, a dead rank), then the L2 prefetch's settings once
# more on the new call count (its fused kernel is ~0.4 us shorter):
# decode at TP4, none / fused / fused-prefetch, four settings, two turns.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22h && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
{
export INTRANODE_TEST_BIN_DIR=$D
timeout 60 $D/intranode-suite faults-suite --nproc 4 --only lamport >$D/faults_lamport_w4.log 2>&1
echo "== faults-suite --nproc 4 --only lamport rc=$? ($SECONDS s)"
grep -E "^faults-suite: (PASS|FAIL)|all [0-9]+ cases|failed" $D/faults_lamport_w4.log | cut -c1-170
for turn in 1 2; do
for s in blocks=8,bytes=8388608 blocks=12,bytes=8388608 blocks=12,bytes=8388608,spread=1 blocks=8,bytes=6291456; do
    n=$(echo $s | tr '=,' '__')
    [ $SECONDS -gt 150 ] && { echo "== $s skipped ($SECONDS s)"; continue; }
    INTRANODE_L2_PREFETCH=$s timeout 40 $D/intranode-run --nproc-per-node 4 --timeout 35 -- \
        $D/intranode-bench decode --batches 1,8,64 --variants none,fused,fused-prefetch --check false \
        --out $D/o >$D/sweep_${turn}_$n.log 2>&1
    echo "== turn $turn $s rc=$? ($SECONDS s)"
    grep -E "^\| llama" $D/o/decode_w4.md | awk -F'|' '$4 ~ /fused/ {printf "%s b%s %s %s;", substr($2,8,3), $3+0, $4 ~ /prefetch/ ? "P" : "F", $9+0}'; echo
done
done
} 2>&1 | tee $OUT/summary_h.txt
tar czf $OUT/logs_h.tgz -C $D $(cd $D && ls *.log)
