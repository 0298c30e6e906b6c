#!/bin/bash
# v19 call B (4 GPUs):
#   1. `intranode-bench link` again, the ranks now lined up by a GPU
#      barrier before each timed run (call A's host barrier left them
#      milliseconds apart: rank 0 read 362 GB/s, the others 191-228).
#   2. The push all-reduce at world 4 at 32 / 128 / 512 MiB (call A had 16
#      MiB-1 GiB): the new default, NCCL, and v18's rings given
#      explicitly (call A's script dropped that run: its `--algos` was
#      garbled).
#   3. The reduce-scatter and all-gather at world 4, 64 MiB-1 GiB: their
#      rings now fit a 76 MiB buffer (their chunks grow from 42 to 64
#      KiB), against `scratch=34603008` (v18's 33 MiB).
#   4. `check --only-barriers` (new flag; the stage moved to
#      check_barriers.rs in v18 and has not run since) and `recreate` at
#      world 4 with the 76 MiB scratch.
#   5. If time is left: the 3-rank reduce-scatter and all-gather, default
#      against `double=1` (from docs/perf/queue/push_slots3_w4.sh).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cb && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
bench() { # name, world, shape, algos, args...
    local name=$1 w=$2 shape=$3 algos=$4
    shift 4
    late 440 $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/cb-out "$@" >$L/$name.log 2>&1
    echo "== $name (world $w, '${shape:-default}', $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
OLD="slots=2,chunk=65536,scratch=34603008"
{
nvidia-smi -L
for w in 4 2; do
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 60 $D/intranode-run --failure-wait-secs 5 --timeout 55 \
        --nproc-per-node $w -- $D/intranode-bench link --reps 80 >$L/link_w$w.log 2>&1
    echo "== 1. link, world $w rc=$? ($SECONDS s)"
    grep -E "link:|rror" $L/link_w$w.log | head -3
    grep -E "^\[[0-9]\] \[[0-9]\] +(ce|sm)" $L/link_w$w.log | sort -k3,3 -k4,4n -s | cut -c5-
done
bench ar_w4_mid 4 "" push,nccl --min-bytes 33554432 --max-bytes 536870912
bench ar_w4_mid_old 4 "$OLD" push --min-bytes 33554432 --max-bytes 536870912
for c in reduce-scatter all-gather; do
    bench ${c}_w4 4 "" push,nccl --collective $c --min-bytes 67108864 --max-bytes 1073741824
    bench ${c}_w4_33m 4 "scratch=34603008" push --collective $c --min-bytes 67108864 --max-bytes 1073741824
done
if ! late 470 barriers; then
    INTRANODE_REQUIRE_GPUS=4 timeout 65 $D/intranode-run --timeout 60 --nproc-per-node 4 -- \
        $D/intranode-suite check --only-barriers >$L/check_barriers.log 2>&1
    echo "== 4. check --only-barriers rc=$? ($SECONDS s)"
    grep -E "^\[[0-9]\] check|FAIL|rror" $L/check_barriers.log | cut -c1-260 | head -4
fi
if ! late 480 recreate; then
    timeout 60 $D/intranode-run --nproc-per-node 4 --timeout 55 -- $D/intranode-suite recreate --cycles 10 \
        --pieces 3 --stream-cycles 5 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$L/recreate_w4.log 2>&1
    echo "== 4. recreate, world 4 rc=$? ($SECONDS s)"
    grep -E "^\[0\] recreate|PASS|FAIL" $L/recreate_w4.log | grep -v "stream cycle" | cut -c1-260 | head -8
fi
for c in reduce-scatter all-gather; do
    bench ${c}_w3 3 "" push,nccl --collective $c --min-bytes 67108864 --max-bytes 1073741824
    bench ${c}_w3_doubled 3 "double=1" push --collective $c --min-bytes 67108864 --max-bytes 1073741824
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callB.tgz -C $D logs
