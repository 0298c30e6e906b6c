#!/bin/bash
# v19 call E (2 GPUs, the machine of call D still warm): auto against NCCL
# at world 2, 1 KiB-1 GiB, on the tree with v19's defaults, beside
# ../shared/results/2026-11-27/h100x4/bench_w2_gpus01_symmetric_1GiB.log.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/ce && mkdir -p $D/logs
for f in bundle/intranode-{run,bench}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
timeout 170 $D/intranode-run --failure-wait-secs 5 --timeout 165 --nproc-per-node 2 -- \
    $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
    --algos auto,nccl --min-bytes 1024 --max-bytes 1073741824 --out /tmp/ce-out >$D/logs/ar_w2_auto.log 2>&1
echo "== auto, world 2 rc=$? ($SECONDS s)"
grep -E "FAIL|mismatch|rror|auto within|auto is" $D/logs/ar_w2_auto.log | head -3
grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $D/logs/ar_w2_auto.log | awk '{print $2, $3, $4, $6, $7, $8}'
tar czf $OUT/callE.tgz -C $D logs
