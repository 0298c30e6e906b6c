#!/bin/bash
# v17 call 1 (4 H100, tree 8e1cc53): the queued sg_push_w4.sh as written
# (item 4), then part 2 of the queued push_rings_w3_w4.sh (item 1: the
# push all-reduce at world 4 with 256/384/512 threads per block at v15's
# best shape), the logs packed into one file.
set -u
: "${OUT:?set OUT}"
rm -rf bundle && mkdir bundle && cp bundle-c1/*.gz bundle/
W=/tmp/c1 && mkdir -p $W/sg
OUT=$W/sg timeout 420 bash docs/perf/queue/sg_push_w4.sh 2>&1 | grep -v "^GPU"
D=/tmp/sg-push
MIB=1048576
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
for threads in 256 384 512; do
    shape="threads=$threads,chunk=65536,slots=3,lookahead=1,scratch=$((152 * MIB))"
    algos=push
    [ $threads = 512 ] && algos=push,nccl
    echo "== push AR, world 4, $shape"
    INTRANODE_PUSH_LAUNCH=$shape NCCL_NVLS_ENABLE=0 timeout 70 $D/intranode-run --nproc-per-node 4 --timeout 60 -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 300 --algos $algos \
        --min-bytes 67108864 --max-bytes 1073741824 --out /tmp/p4 >$W/push_t$threads.log 2>&1
    echo "rc=$?"
    grep -E "FAIL|mismatch|rror" $W/push_t$threads.log | head -2
    rows $W/push_t$threads.log
done
tar czf $OUT/call1.tgz -C $W .
echo "== call total $SECONDS s"
