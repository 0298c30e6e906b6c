#!/bin/bash
# Queued (issue 34, item 4; written in v16, when no 4-GPU machine was
# lent after the first call). On a 4-GPU machine, from the repo root with
# the bundle (`cargo xtask device-bundle`, or intranode-run.gz,
# intranode-bench.gz and intranode-suite.gz) in bundle/:
#   OUT=DIR bash docs/perf/queue/sg_push_w4.sh
#   1. the suite's scatter/gather check at world 4: every type and op, both
#      forms forced, and push all-reduces mixed back to back with them;
#   2. reduce-scatter and all-gather at world 4, 16 MiB-1 GiB: the Lamport
#      form, the push form (one ring per block and peer since v16: 42 KiB
#      chunks in the default 33 MiB scratch, where v16's first call ran
#      two rings and 21 KiB), NCCL and auto, in one run;
#   3. the push form with a 64 MiB scratch (64 KiB chunks) and with 3
#      slots and lookahead 1, 64 MiB-1 GiB;
#   4. world 3 (GPUs 0-2): Lamport form, push form, NCCL, 16-256 MiB.
# Prediction (docs/perf/v16/NOTES.md): the default within 3 % of v16's
# 64 KiB rings on 152 MiB (reduce-scatter 0.91-0.97x NCCL, all-gather
# 0.94x from 64 MiB); if it leads NCCL from 64 MiB to 1 GiB, raise
# `scatter_gather_max_bytes` at 4 ranks past 64 MiB (`host/src/algo.rs`).
# Writes check_sg_w4.log, rs_w4.log, ag_w4.log, shapes_w4.txt, rs_w3.log,
# ag_w3.log, summary.txt; about 5 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/sg-push
mkdir -p $D
for f in bundle/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
R="$D/intranode-run --failure-wait-secs 5 --timeout"
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
bench() { # log, world, timeout, collective, args...
    local log=$1 w=$2 t=$3 c=$4
    shift 4
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout $((t + 10)) $R $t --nproc-per-node $w -- \
        $D/intranode-bench bench --collective $c --ks 16 --graph-only --no-decode --no-skew \
        --large-calls 200 --out /tmp/sg-out "$@" >"$log" 2>&1
    echo "rc=$? ($log)"
}
{
echo "== 1. check --only-scatter-gather, world 4"
INTRANODE_REQUIRE_GPUS=4 timeout 100 $R 90 --nproc-per-node 4 -- $D/intranode-suite check \
    --only-scatter-gather >$OUT/check_sg_w4.log 2>&1
echo "rc=$?"
grep -E "^\[0\] check|FAIL|rror|wrong" $OUT/check_sg_w4.log | cut -c1-250 | head -5
for c in reduce-scatter all-gather; do
    [ $c = reduce-scatter ] && s=rs || s=ag
    echo "== 2. $c, world 4, default shape"
    bench $OUT/${s}_w4.log 4 140 $c --algos lamport,push,nccl,auto --min-bytes 16777216 --max-bytes 1073741824
    rows $OUT/${s}_w4.log
done
: >$OUT/shapes_w4.txt
for c in reduce-scatter all-gather; do
    for shape in scratch=67108864 slots=3,lookahead=1; do
        echo "== 3. $c, world 4, push, $shape"
        INTRANODE_PUSH_LAUNCH=$shape bench /tmp/sg-shape.log 4 80 $c --algos push --min-bytes 67108864 \
            --max-bytes 1073741824
        { echo "-- $c $shape"; rows /tmp/sg-shape.log; } | tee -a $OUT/shapes_w4.txt
    done
done
for c in reduce-scatter all-gather; do
    [ $c = reduce-scatter ] && s=rs || s=ag
    echo "== 4. $c, world 3 (GPUs 0-2)"
    bench $OUT/${s}_w3.log 3 80 $c --algos lamport,push,nccl --min-bytes 16777216 --max-bytes 268435456
    rows $OUT/${s}_w3.log
done
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
