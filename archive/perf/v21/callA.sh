#!/bin/bash
# v21 call A (4 GPUs): A/B of branch v21-copy-tail (`prims::grid::copy4`'s
# tail four vectors at a time, loads in flight) against main 52ec928.
# `tail` is main with that one kernel change; `base` is main. Both bench
# binaries alternate in the same call, every result checked.
# Predictions (archive/perf/v20/NOTES.md, "An open cause"):
#   - all-gather, world 4, on 33 MiB of rings (`scratch=34603008`,
#     2728-vector chunks, 1-2 vectors a thread in the tail): from ~181 /
#     ~645 / ~2475 us at 64 MiB / 256 MiB / 1 GiB toward the 32 KiB
#     chunks' 171 / 615 / 2375;
#   - the all-gather's default (32 KiB chunks, no tail): unchanged;
#   - push all-reduce at 8-32 MiB (message-sized chunks with tails): a
#     few % at worlds 4 and 2.
# Then the stress check on both builds (main's `push_launch_for` refactor,
# e3e0ba6, has not run on a GPU) and the scatter-gather check.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/ca && mkdir -p $D/logs $D/base $D/tail
gzip -dc bundle/intranode-run.gz >$D/intranode-run && chmod +x $D/intranode-run
for b in base tail; do
    for x in bench suite; do gzip -dc bundle/$b-intranode-$x.gz >$D/$b/intranode-$x && chmod +x $D/$b/intranode-$x; done
done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
bench() { # name, build, world, shape, algos, args...
    local name=$1 b=$2 w=$3 shape=$4 algos=$5
    shift 5
    late 360 $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node $w -- \
        $D/$b/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/ca-out "$@" >$L/$name.log 2>&1
    echo "== $name ($b, world $w, '${shape:-default}', $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -3
    rows $L/$name.log
}
check() { # name, build, world, limit, args...
    local name=$1 b=$2 w=$3 t=$4
    shift 4
    late $((560 - t)) $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_REQUIRE_GPUS=$w timeout $((t + 5)) \
        $D/intranode-run --timeout $t --nproc-per-node $w -- $D/$b/intranode-suite check "$@" >$L/check_$name.log 2>&1
    echo "== check $name ($b, world $w) $* rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_$name.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
}
{
nvidia-smi -L
big="--min-bytes 67108864 --max-bytes 1073741824"
for turn in 1 2; do
    for b in base tail; do
        bench ag33_${b}_$turn $b 4 "scratch=34603008" push --collective all-gather $big
    done
done
for b in base tail; do
    bench ag_${b} $b 4 "" push,nccl --collective all-gather $big
done
for turn in 1 2; do
    for b in base tail; do
        bench ar_w4_${b}_$turn $b 4 "" push,two-shot --min-bytes 8388608 --max-bytes 33554432
    done
done
for b in base tail; do
    bench ar_w2_${b} $b 2 "" push,two-shot --min-bytes 8388608 --max-bytes 33554432
    bench ar1g_w4_${b} $b 4 "" push,nccl --min-bytes 268435456 --max-bytes 1073741824
done
check stress_tail tail 4 70 --only-stress --algos push,two-shot
check stress_base base 4 70 --only-stress --algos push
check sg_tail tail 4 30 --only-scatter-gather
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/ca.tgz -C $D logs
