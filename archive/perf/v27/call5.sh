#!/bin/bash
# 4 H200 (nvidia-h200-x4), the same bundle as calls 2-4 (main at 48b1508):
# the check stages call 4's full check did not reach before its bound, on
# 4 GPUs: graph, hog, norm, scatter-gather, symmetric, types, free, barriers.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new
mkdir -p /tmp/l
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4 INTRANODE_BARRIER_TIMEOUT_MS=10000
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(passed|ok|checked|PASS)|PASS|FAIL|rror|got |never' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -2 | cut -c1-300)"; }
R=/tmp/new/intranode-run
S() { local tag=$1 to=$2; shift 2; go $tag $to $R --failure-wait-secs 5 --timeout $((to-5)) --nproc-per-node 4 -- /tmp/new/intranode-suite check "$@"; }
{
for st in graph hog norm scatter-gather symmetric types free barriers; do
  left=$((300 - SECONDS)); [ $left -lt 20 ] && { echo "$st not run: time"; continue; }
  to=$(( left < 90 ? left : 90 ))
  S $st $to --only-$st
done
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
