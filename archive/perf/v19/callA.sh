#!/bin/bash
# v19 call A (4 GPUs): issue 34, item 1.
#   1. `intranode-bench link` (new): what NVLink carries with every rank
#      writing to (copy engines, SM stores) or reading from (copy engines)
#      every peer at once, no collective: the ceiling of the push form, at
#      world 4 and world 2 (GPUs 0,1).
#   2. The push all-reduce at world 4, two turns, NCCL in both: the new
#      default (3 slots of 16 KiB, lookahead 1, 76 MiB of scratch,
#      `push_shape::ALL_REDUCE_RINGS`) against v18's default rings,
#      given explicitly.
#   3. `check --only-stress --algos push` and `check --only-graph --algos
#      push,auto --graph-replays 200` with the new default.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/ca && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
OLD="slots=2,chunk=65536,scratch=34603008"
{
nvidia-smi -L
for w in 4 2; do
    late 200 link_w$w && continue
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 60 $D/intranode-run --failure-wait-secs 5 --timeout 55 \
        --nproc-per-node $w -- $D/intranode-bench link >$L/link_w$w.log 2>&1
    echo "== 1. link, world $w rc=$? ($SECONDS s)"
    grep -E "link|rror" $L/link_w$w.log | grep -v "^\[[1-9]\] link: the" | head -3
    grep -E "^\[[0-9]\] +(ce|sm)" $L/link_w$w.log | sort -k2,2 -k3,3n -s
done
for turn in 1 2; do
    for shape in "" "$OLD"; do
        name=ar_${turn}_${shape:+old}
        late 400 $name && continue
        INTRANODE_PUSH_LAUNCH=$shape timeout 80 $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node 4 -- \
            $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
            --algos push${shape:-,nccl} --min-bytes 16777216 --max-bytes 1073741824 --out /tmp/ca-out >$L/$name.log 2>&1
        echo "== 2. turn $turn, '${shape:-new default}' rc=$? ($SECONDS s)"
        grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
        rows $L/$name.log
    done
done
for c in "stress 100 --only-stress --algos push" "graph 100 --only-graph --algos push,auto --graph-replays 200"; do
    set -- $c; name=$1; t=$2; shift 2
    late 470 $name && continue
    INTRANODE_REQUIRE_GPUS=4 timeout $((t + 5)) $D/intranode-run --timeout $t --nproc-per-node 4 -- \
        $D/intranode-suite check "$@" >$L/check_$name.log 2>&1
    echo "== 3. check $* rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_$name.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callA.tgz -C $D logs
