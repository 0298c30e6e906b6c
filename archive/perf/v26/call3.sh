#!/bin/bash
# 1 H200, main after the store split: the check stages call 2's full
# check did not reach within its 250 s (scatter-gather, free-running,
# types, symmetric buffers, barriers) at 4 ranks under MPS, and the
# back-to-back stage again, to compare its time with calls 1 and 2.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000 INTRANODE_REQUIRE_GPUS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(passed|ok|checked)|rror|got |never' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -4 | cut -c1-400)"; }
R=/tmp/new/intranode-run
S() { go $1 $2 $R --mps --failure-wait-secs 5 --timeout $(($2-10)) --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/new/intranode-suite check $3; }
{
S sg4 120 --only-scatter-gather
S free4 150 --only-free
S types4 60 --only-types
S symm4 90 --only-symmetric
S barriers4 90 --only-barriers
S stress4 120 --only-stress
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
