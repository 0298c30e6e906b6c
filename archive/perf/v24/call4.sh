#!/bin/bash
# 1 H200: the schedule fuzzer's build, 4 ranks under MPS, the free-running
# stage with fewer replays than call 3 (which its 90 s limit cut short).
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/fuzz /tmp/fuzz
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000
t0=$SECONDS
timeout 125 /tmp/new/intranode-run --mps --failure-wait-secs 5 --timeout 120 --nproc-per-node 4 --gpus 0,0,0,0 -- \
  /tmp/fuzz/intranode-suite check --only-free --free-replays 30 > $OUT/fuzz4_free.log 2>&1
echo "fuzz4_free rc=$? $((SECONDS-t0))s" | tee -a $OUT/fuzz4_free.log
pkill -f nvidia-cuda-mps
grep -hE "check rank 0|ran out|got |rror" $OUT/fuzz4_free.log | head -5
