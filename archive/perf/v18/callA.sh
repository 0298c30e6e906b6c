#!/bin/bash
# v18 call A (4 H100 or H200, lent at the start of the session), tree at
# v17's end (9926c57):
#   1. the harness fix of v17 (`job_gpus_or_skip`), never GPU-run: 4 ranks
#      on 2 GPUs without `--gpus` must all skip at once, and with
#      INTRANODE_REQUIRE_GPUS=4 all fail at once (v17 call 2b: two ranks
#      waited 140 s);
#   2. `check --only-scatter-gather` at world 4: v17's `sg_params`
#      refactor, never GPU-run;
#   3. docs/perf/queue/lamport_shapes_w4.sh (item 2): the Lamport launch
#      shapes at world 4, 64 KiB-16 MiB, NCCL beside;
#   4. the w4 part of docs/perf/queue/push_doubled_w3_w4.sh (items 1, 5):
#      the push all-reduce default against doubled, two turns, then the
#      push stress check doubled; then world 3 if time is left.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/ca && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
bench() { # name, world, shape, args...
    local name=$1 w=$2 shape=$3
    shift 3
    [ $SECONDS -gt 520 ] && { echo "== $name skipped at $SECONDS s"; return; }
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 70 \
        $D/intranode-run --failure-wait-secs 5 --timeout 60 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --out /tmp/ca-out "$@" >$L/$name.log 2>&1
    echo "== $name (w$w, '${shape:-default}') rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
{
echo "== 1. harness: 4 ranks on GPUs 0,1, no --gpus"
s=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 timeout 60 $D/intranode-run --failure-wait-secs 5 --timeout 50 --nproc-per-node 4 -- \
    $D/intranode-suite check --only-scatter-gather >$L/harness_skip.log 2>&1
echo "skip: rc=$? in $((SECONDS - s)) s"; grep -iE "skip|error" $L/harness_skip.log | cut -c1-200 | head -6
s=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 INTRANODE_REQUIRE_GPUS=4 timeout 60 $D/intranode-run --failure-wait-secs 5 --timeout 50 \
    --nproc-per-node 4 -- $D/intranode-suite check --only-scatter-gather >$L/harness_require.log 2>&1
echo "require 4: rc=$? in $((SECONDS - s)) s"; grep -iE "skip|error|fail" $L/harness_require.log | cut -c1-200 | head -6
echo "== 2. check --only-scatter-gather, world 4"
INTRANODE_REQUIRE_GPUS=4 timeout 45 $D/intranode-run --failure-wait-secs 5 --timeout 40 --nproc-per-node 4 -- \
    $D/intranode-suite check --only-scatter-gather >$L/check_sg_w4.log 2>&1
echo "rc=$? ($SECONDS s)"; grep -v "done, last" $L/check_sg_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-200 | head -3
echo "== 3. Lamport shapes, world 4"
mkdir -p $OUT/shapes
OUT=$OUT/shapes bash docs/perf/queue/lamport_shapes_w4.sh >$L/shapes.log 2>&1
echo "rc=$? ($SECONDS s)"
sed -n '/== summary/,$p' $L/shapes.log
echo "== 4. push all-reduce doubled, world 4"
TWO="blocks=264,threads=256"
bench ar_w4_default 4 "" --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824
bench ar_w4_doubled 4 "$TWO" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w4_default2 4 "" --algos push --min-bytes 67108864 --max-bytes 1073741824
bench ar_w4_doubled2 4 "$TWO" --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
if [ $SECONDS -lt 500 ]; then
    INTRANODE_PUSH_LAUNCH=$TWO INTRANODE_REQUIRE_GPUS=4 timeout 80 $D/intranode-run --timeout 75 --nproc-per-node 4 -- \
        $D/intranode-suite check --only-stress --algos push --stress-calls 2000 >$L/check_stress_w4.log 2>&1
    echo "== stress doubled w4 rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_stress_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
fi
bench ar_w3_default 3 "" --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824
bench ar_w3_doubled 3 "$TWO" --algos push --min-bytes 16777216 --max-bytes 1073741824
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callA.tgz -C $D logs
