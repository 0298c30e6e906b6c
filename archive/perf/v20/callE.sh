#!/bin/bash
# v20 call E (4 GPUs), the final tree, item 7: 8 ranks on 4 GPUs (two a
# GPU), the stress stage (every form back to back: Lamport one-shot and
# two-shot, one-shot, two-shot, push with the whole-line chunks, HCM,
# auto) and the reduce-scatter and all-gather stage. Bound raised as in
# v15: two ranks time-slice each GPU.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=60000
D=/tmp/ce && mkdir -p $D/logs
for f in bundle/intranode-{run,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
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
tar czf $OUT/callE.tgz -C $D logs
