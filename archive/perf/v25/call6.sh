#!/bin/bash
# 1 H200, library at cb1ecf2 (before the refusal): ranks that are threads
# of one process on one GPU. Does a wait run out first (the example now
# checks the communicator's health before the data), and does the
# driver's lazy kernel loading cause it (CUDA_MODULE_LOADING=EAGER)?
# Lazy loading may synchronize the context when a kernel is first
# launched; in one context that waits for a peer's spinning kernel.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
go() { local tag=$1; shift; local t0=$SECONDS
  timeout 60 "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'passed|rror|got |never' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | grep -v 'Drop\|INVALIDATED' | head -3 | cut -c1-300)"; }
E=/tmp/ex/05_from_devices
{
go lazy4 $E --gpus 0,0,0,0 --eager 20 --replays 20
CUDA_MODULE_LOADING=EAGER go eager4 $E --gpus 0,0,0,0 --eager 50 --replays 100
CUDA_MODULE_LOADING=EAGER go eager3 $E --gpus 0,0,0 --eager 50 --replays 100
CUDA_MODULE_LOADING=EAGER go eager2_big $E --gpus 0,0 --eager 50 --replays 50 --hidden 300000
for a in lamport lamport-two-shot one-shot two-shot push; do
  CUDA_MODULE_LOADING=EAGER INTRANODE_ALL_REDUCE_ALGO=$a go eager4_$a $E --gpus 0,0,0,0 --eager 20 --replays 20 --hidden 300000
done
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
