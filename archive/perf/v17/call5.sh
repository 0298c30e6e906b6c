#!/bin/bash
# v17 call 5 (4 GPUs, the last device minutes): the `check` stages that
# call 4's 278 s did not reach (its sweep of 864 cases, every form, had
# finished in 113 s), one by one, then the late fault cases.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/c5 && mkdir -p $D/logs
for f in bundle-c3/intranode-{run,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
{
for stage in stress free norm scatter-gather types symmetric; do
    t=30; [ $stage = stress ] && t=80
    INTRANODE_REQUIRE_GPUS=4 timeout $((t + 5)) $D/intranode-run --failure-wait-secs 5 --timeout $t --nproc-per-node 4 -- \
        $D/intranode-suite check --only-$stage >$L/check_$stage.log 2>&1
    echo "== $stage rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_$stage.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
done
left=$((200 - SECONDS))
[ $left -gt 20 ] && { INTRANODE_REQUIRE_GPUS=4 timeout $left $D/intranode-suite faults-suite --nproc 4 --only late \
    >$L/faults_late.log 2>&1; echo "== faults late rc=$?"; grep -E "^faults-suite: (PASS|FAIL)|cases" $L/faults_late.log | cut -c1-160; }
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/call5.tgz -C $D logs
