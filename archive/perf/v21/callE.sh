#!/bin/bash
# v21 call E (4 GPUs, right after call D on the same machine): 8 ranks on
# 4 GPUs, two a GPU, on the final tree (copy4 is in every push copy):
# check --only-stress and --only-scatter-gather.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=60000
D=/tmp/dd && mkdir -p $D/logs-e
# The binaries are call D's, on the same warm machine.
L=$D/logs-e
{
for c in "stress 170 --only-stress" "sg 100 --only-scatter-gather"; do
    set -- $c; name=$1; t=$2; shift 2
    [ $SECONDS -gt $((300 - t)) ] && { echo "== $name skipped ($SECONDS s)"; continue; }
    timeout $((t + 5)) $D/intranode-run --failure-wait-secs 10 --timeout $t --nproc-per-node 8 \
        --gpus 0,1,2,3,0,1,2,3 -- $D/intranode-suite check "$@" >$L/check_w8_$name.log 2>&1
    echo "== check world 8 on 4 GPUs $* rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_w8_$name.log | grep -E "^\[[0-7]\] check|FAIL|rror|wrong" | cut -c1-260 | head -9
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/ce.tgz -C $D logs-e
