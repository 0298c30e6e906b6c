#!/bin/bash
# v20 call B (4 GPUs): push chunks in whole 128-byte lines (NOTE [push
# chunks in whole lines]). `old` is call A's build (97703c9), `new` this
# one; both in the same call, alternating, every result checked.
#   1. The reduce-scatter and all-gather at world 4 (default rings:
#      2730 -> 2728 vectors a chunk), 32 MiB-1 GiB; and `new` with 76 MiB
#      (64 KiB chunks). Prediction: the all-gather's 1 GiB from ~2470 to
#      ~2370 us, 64 MiB from ~181 toward ~173; the reduce-scatter within
#      1 %.
#   2. The push all-reduce at world 4 and at world 2 (GPUs 0,1), 8-64
#      MiB, where the message (not the rings) sets the chunk and it was
#      not whole lines: a few % at 16-32 MiB if lines matter there.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cb && mkdir -p $D/logs $D/old $D/new
gzip -dc bundle/intranode-run.gz >$D/intranode-run && chmod +x $D/intranode-run
for b in old new; do gzip -dc bundle/$b-intranode-bench.gz >$D/$b/intranode-bench && chmod +x $D/$b/intranode-bench; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
bench() { # name, build, world, shape, algos, args...
    local name=$1 b=$2 w=$3 shape=$4 algos=$5
    shift 5
    late 470 $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node $w -- \
        $D/$b/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/cb-out "$@" >$L/$name.log 2>&1
    echo "== $name ($b, world $w, '${shape:-default}', $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -3
    rows $L/$name.log
}
{
nvidia-smi -L
for c in all-gather reduce-scatter; do
    for r in a b; do
        [ $r = a ] && sz="--min-bytes 67108864 --max-bytes 1073741824" || sz="--min-bytes 33554432 --max-bytes 536870912"
        bench ${c}_old_$r old 4 "" push,nccl --collective $c $sz
        bench ${c}_new_$r new 4 "" push --collective $c $sz
        bench ${c}_new76_$r new 4 "scratch=79691776" push --collective $c $sz
    done
done
for w in 4 2; do
    for r in a b; do
        [ $r = a ] && sz="--min-bytes 4194304 --max-bytes 67108864" || sz="--min-bytes 8388608 --max-bytes 33554432"
        bench ar_w${w}_old_$r old $w "" push,nccl $sz
        bench ar_w${w}_new_$r new $w "" push $sz
    done
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callB.tgz -C $D logs
