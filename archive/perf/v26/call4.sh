#!/bin/bash
# 1 H200: A/B of the back-to-back stage at 4 ranks under MPS, the suite
# at 5913ee0 (call 1's) against main's, alternating, to tell a host-side
# regression from the machine: calls 2 and 3 took 55-57 s where call 1
# took 35 s.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000 INTRANODE_REQUIRE_GPUS=1
go() { local tag=$1 bin=$2; local t0=$SECONDS
  timeout 130 /tmp/new/intranode-run --mps --failure-wait-secs 5 --timeout 120 --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/new/$bin check --only-stress > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(ok|passed)|rror' /tmp/l/$tag.log | head -2 | cut -c1-300)"; }
{
go new1 intranode-suite
go old1 suite-old
go new2 intranode-suite
go old2 suite-old
} 2>&1 | tee $OUT/summary.txt
