#!/bin/bash
# Queued (issue 34, items 1 and 5; written in v17, whose device time ran
# out). On a 4-GPU machine, from the repo root with the bundle
# (`cargo xtask device-bundle`, or intranode-run.gz, intranode-bench.gz
# and intranode-suite.gz) in bundle/:
#   OUT=DIR bash docs/perf/queue/push_doubled_w3_w4.sh
# The push form on twice the blocks of half the threads (two blocks per
# SM, `INTRANODE_PUSH_LAUNCH=blocks=264,threads=256`, what
# `PushShape::doubled` gives) against the default 132 x 512:
#   1. the all-reduce at world 4, two turns, NCCL in the first (v17 call
#      4 on 4 H100: doubled 3 % faster from 64 MiB, 0.99x / 1.02x / 1.05x
#      NCCL at 64 MiB / 256 MiB / 1 GiB; the default 1.02x / 1.05x /
#      1.09x);
#   2. the all-reduce at world 3 (GPUs 0-2; auto runs the push form there
#      from 16 MiB), the same shapes and v15's rings that fit
#      (`chunk=65536,slots=3,lookahead=1,scratch=100 MiB`), NCCL beside;
#   3. the reduce-scatter and all-gather at world 3, default and doubled
#      (at 4 ranks doubled was slower, the chunks halve; at 2 the
#      reduce-scatter gained 12-15 %, and it runs doubled there);
#   4. `check --only-stress --algos push` doubled, at world 4 (after 1)
#      and 3 (last).
# If doubled leads the default by more than noise at 3 or 4 ranks, add
# that world to the all-reduce's doubled worlds (beside
# `RS_DOUBLED_BLOCKS_WORLDS` in `host/src/comm/scatter_gather.rs`) and
# re-tune `push_min_bytes` there (`host/src/algo.rs`).
# Writes summary.txt and logs.tgz; about 6 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/push-doubled && mkdir -p $D/logs
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
        --out /tmp/push-doubled-out "$@" >$L/$name.log 2>&1
    echo "== $name (world $w, '${shape:-default}') rc=$?"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
TWO="blocks=264,threads=256"
stress() { # world: the push stress check, doubled
    local w=$1
    late "check world $w" && return
    echo "== check --only-stress --algos push, world $w, $TWO"
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$TWO INTRANODE_REQUIRE_GPUS=$w timeout 100 \
        $D/intranode-run --timeout 90 --nproc-per-node $w -- $D/intranode-suite check --only-stress --algos push \
        --stress-calls 2000 >$L/check_stress_w$w.log 2>&1
    echo "rc=$?"
    grep -v "done, last" $L/check_stress_w$w.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
}
FIT="chunk=65536,slots=3,lookahead=1,scratch=104857600"
{
bench ar_w4_default 4 "" --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824
bench ar_w4_doubled 4 "$TWO" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w4_default2 4 "" --algos push --min-bytes 67108864 --max-bytes 1073741824
bench ar_w4_doubled2 4 "$TWO" --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
stress 4
bench ar_w3_default 3 "" --algos push,nccl,auto --min-bytes 16777216 --max-bytes 1073741824
bench ar_w3_doubled 3 "$TWO" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w3_fit 3 "$FIT" --algos push --min-bytes 16777216 --max-bytes 1073741824
for c in reduce-scatter all-gather; do
    bench ${c}_w3_default 3 "" --collective $c --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
    bench ${c}_w3_doubled 3 "$TWO" --collective $c --algos push --min-bytes 67108864 --max-bytes 1073741824
done
stress 3
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $D logs
