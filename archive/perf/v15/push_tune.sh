#!/bin/bash
# v15 (issue 34, items 1 and 5), one call on 4 GPUs:
#   1. the push form at world 4, 16 MiB-1 GiB, under launch shapes whose
#      rings fit: v14's shape sweep (push_shapes_w4.txt in
#      ../shared/results/2026-11-27/h100x4/) left the scratch at its 33 MiB
#      default, which `push_launch` divides among 2 x 132 x (W-1) x slots
#      slots, so at 4 ranks every chunk was cut to 21 KiB (2 slots) or
#      11 KiB (4 slots) whatever `chunk=` asked. Prediction: with the
#      chunk it was tuned at on 2 ranks (64-128 KiB) the per-tile cost
#      (block barrier, release fence, one signal's latency) shrinks 3-6x
#      and push at 1 GiB goes from ~326 toward the ~361 GB/s it reaches
#      on 2 ranks (NCCL 355). NCCL beside the first and last shape.
#   2. bench --tune at world 3 (GPUs 0-2) and world 4, to 256 MiB, every
#      form with the default shapes: the crossovers per world size
#      (world 3 was never measured).
# Usage, from the repo root with the bundle in bundle/ (intranode-run.gz
# and intranode-bench.gz at least):  OUT=DIR bash archive/perf/v15/push_tune.sh
# Writes push_w4.txt, tune_w{3,4}.{log,csv}, crossovers_w{3,4}.json; about
# 8 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
B=/tmp/v15
mkdir -p $B
for f in ${BUNDLE:-bundle}/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$B/$n" && chmod +x "$B/$n" || exit 1
done
nvidia-smi -L
run() { # world, timeout, args...
    local w=$1 t=$2
    shift 2
    timeout $((t + 10)) $B/intranode-run --nproc-per-node $w --failure-wait-secs 10 --timeout $t -- $B/intranode-bench "$@"
}
# The table rows of a bench log: bytes algo mean_us x_nccl.
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
MIB=1048576
: >$OUT/push_w4.txt
n=0
for shape in "" "scratch=$((100 * MIB))" "chunk=131072,scratch=$((200 * MIB))" \
    "slots=4,scratch=$((200 * MIB))" "chunk=131072,slots=4,scratch=$((400 * MIB))" \
    "chunk=131072,slots=3,lookahead=1,scratch=$((300 * MIB))"; do
    n=$((n + 1))
    algos=push
    [ $n = 1 ] || [ $n = 6 ] && algos=push,nccl
    echo "== 1.$n push at world 4, shape '${shape:-default}'"
    INTRANODE_PUSH_LAUNCH=$shape run 4 70 bench --ks 16 --graph-only --no-decode --no-skew \
        --large-calls 300 --algos $algos --min-bytes 16777216 --max-bytes 1073741824 \
        --out /tmp/push-$n >/tmp/push-$n.log 2>&1
    echo "rc=$?"
    grep -E "FAIL|rror|mismatch" /tmp/push-$n.log | head -3
    rows /tmp/push-$n.log | sed "s/^/${shape:-default} /" | tee -a $OUT/push_w4.txt
done
common="bench --ks 16 --graph-only --no-decode --no-skew --calls 2000 --large-calls 300"
echo "== 2. tune, world 3 (GPUs 0-2)"
CUDA_VISIBLE_DEVICES=0,1,2 INTRANODE_REQUIRE_GPUS=3 run 3 140 $common --max-bytes 268435456 \
    --tune $OUT/crossovers_w3.json --out /tmp/tune-w3 >$OUT/tune_w3.log 2>&1
echo "rc=$?"
echo "== 3. tune, world 4"
run 4 140 $common --max-bytes 268435456 --tune $OUT/crossovers_w4.json --out /tmp/tune-w4 \
    >$OUT/tune_w4.log 2>&1
echo "rc=$?"
cp /tmp/tune-w3/*.csv $OUT/tune_w3.csv 2>/dev/null
cp /tmp/tune-w4/*.csv $OUT/tune_w4.csv 2>/dev/null
for w in 3 4; do
    echo "== tune w$w (bytes algo mean_us x_nccl)"
    rows $OUT/tune_w$w.log | awk '$1 >= 65536'
    grep -E "FAIL|rror|mismatch" $OUT/tune_w$w.log | head -3
done
echo "== crossovers"
cat $OUT/crossovers_w3.json $OUT/crossovers_w4.json 2>/dev/null | tr -d ' \n'
echo
echo "== done ($SECONDS s)"
