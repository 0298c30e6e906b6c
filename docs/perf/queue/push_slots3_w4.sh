#!/bin/bash
# Queued (issue 34, items 1 and 5; written in v18, whose device time ran
# out). On a 4-GPU machine, from the repo root with the bundle
# (`cargo xtask device-bundle`, or intranode-run.gz, intranode-bench.gz
# and intranode-suite.gz) in bundle/:
#   OUT=DIR bash docs/perf/queue/push_slots3_w4.sh
# v18 (docs/perf/v18/NOTES.md, calls B-D on 4 H100): the push all-reduce
# at 4 ranks, doubled (the default there since v18) with a third ring
# slot, `slots=3,lookahead=1,chunk=16384,scratch=79691776` (16 KiB
# chunks, 76 MiB of scratch), ran 313.1 / 1176.9 / 4597 us at 64 MiB /
# 256 MiB / 1 GiB (NCCL 325 / 1182 / 4518-4543 in the calls beside it),
# against the default's 320.3 / 1204.3 / 4745. It ran once, with no
# stress check. This script:
#   1. the all-reduce at world 4, two turns, NCCL in both: the default,
#      the 16 KiB shape and the 32 KiB one (`chunk=65536,scratch=159383552`,
#      4596-4610 us at 1 GiB in two calls);
#   2. `check --only-stress --algos push` and `check --only-graph
#      --algos push,auto --graph-replays 200`, both with the 16 KiB shape;
#   3. the reduce-scatter and all-gather at world 3 (GPUs 0-2), default
#      and `double=1` (not measured at 3 ranks; doubled gained 12-15 % in
#      the 2-rank reduce-scatter and lost 3 % at 4 ranks).
# If the 16 KiB shape leads the default in both turns and the checks
# pass: make it the 4-rank default (a per-world default shape: 3 slots,
# lookahead 1, 16 KiB chunks, 76 MiB scratch, next to
# `ALL_REDUCE_DOUBLED_WORLDS` in `host/src/config.rs`) and set
# `push_min_bytes[4]` (`host/src/algo.rs`) from where it leads NCCL.
# Writes summary.txt and logs.tgz; about 6 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/push-slots3 && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
# The whole script stays within 9 minutes: a step that would start past
# 7 minutes is skipped, with a line saying so.
late() { [ $SECONDS -gt 420 ] && echo "== $1 skipped: $SECONDS s gone"; }
bench() { # name, world, shape, args...
    local name=$1 w=$2 shape=$3
    shift 3
    late $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 70 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --out /tmp/push-slots3-out "$@" >$L/$name.log 2>&1
    echo "== $name (world $w, '${shape:-default}') rc=$?"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
check() { # name, timeout, args...
    local name=$1 t=$2
    shift 2
    late $name && return
    INTRANODE_PUSH_LAUNCH=$S16 INTRANODE_REQUIRE_GPUS=4 timeout $((t + 5)) \
        $D/intranode-run --timeout $t --nproc-per-node 4 -- $D/intranode-suite check "$@" >$L/$name.log 2>&1
    echo "== $name ($*) rc=$?"
    grep -v "done, last" $L/$name.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
}
S16="slots=3,lookahead=1,chunk=16384,scratch=79691776"
S32="slots=3,lookahead=1,chunk=65536,scratch=159383552"
AR="--min-bytes 16777216 --max-bytes 1073741824"
{
for turn in 1 2; do
    bench ar_default_$turn 4 "" --algos push,nccl $AR
    bench ar_s16_$turn 4 "$S16" --algos push $AR
    bench ar_s32_$turn 4 "$S32" --algos push $AR
done
check stress_s16 90 --only-stress --algos push --stress-calls 4000
check graph_s16 90 --only-graph --algos push,auto --graph-replays 200
for c in reduce-scatter all-gather; do
    bench ${c}_w3_default 3 "" --collective $c --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
    bench ${c}_w3_doubled 3 "double=1" --collective $c --algos push --min-bytes 67108864 --max-bytes 1073741824
done
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $D logs
