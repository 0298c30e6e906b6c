#!/bin/bash
# v19 call G (4 GPUs, the last device minutes): the all-gather and
# reduce-scatter at world 4 on the default 33 MiB of rings against a
# 76 MiB scratch (`scratch=79691776`, which leaves the all-reduce on
# v18's rings; not timed here), the all-gather in two turns: call B's
# single run had the 76 MiB all-gather 5 % faster from 256 MiB and 4 %
# slower at 64 MiB.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cg && mkdir -p $D/logs
for f in bundle/intranode-{run,bench}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
{
nvidia-smi -L
for run in "ag 1 all-gather" "ag 2 all-gather" "rs 1 reduce-scatter"; do
    set -- $run
    for shape in "" "scratch=79691776"; do
        name=$1_$2_${shape:+76m}
        [ $SECONDS -gt 170 ] && { echo "== $name skipped at $SECONDS s"; continue; }
        algos=push,nccl; [ -n "$shape" ] && algos=push
        INTRANODE_PUSH_LAUNCH=$shape timeout 45 $D/intranode-run --failure-wait-secs 5 --timeout 40 --nproc-per-node 4 -- \
            $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 --collective $3 \
            --algos $algos --min-bytes 67108864 --max-bytes 1073741824 --out /tmp/cg-out >$L/$name.log 2>&1
        echo "== $3 turn $2, '${shape:-default}' rc=$? ($SECONDS s)"
        grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
        rows $L/$name.log
    done
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callG.tgz -C $D logs
