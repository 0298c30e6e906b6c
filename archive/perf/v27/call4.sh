#!/bin/bash
# 4 H200 (nvidia-h200-x4), the same bundle as calls 2-3 (main at 48b1508):
# the suite's full check at 4 ranks on 4 GPUs, the Lamport fault cases at
# 4 ranks (they need a GPU each), the free-running bench beside NCCL at 4
# ranks (graph mode, every result checked), and example 05 on 4 GPUs.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
nvidia-smi topo -m > $OUT/topo.txt 2>&1
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(passed|ok|checked|PASS)|PASS|FAIL|rror|got |never' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -4 | cut -c1-300)"; }
R=/tmp/new/intranode-run
{
go check4 200 $R --failure-wait-secs 5 --timeout 190 --nproc-per-node 4 -- /tmp/new/intranode-suite check
go faults4 130 /tmp/new/intranode-suite faults-suite --nproc 4 --only lamport --large false --launcher /tmp/new/intranode-run
go bench4 150 $R --timeout 140 --nproc-per-node 4 -- /tmp/new/intranode-bench bench --ks 16 --graph-only --no-decode --large-calls 20
go fd4 40 /tmp/ex/05_from_devices --gpus 0,1,2,3 --eager 20 --replays 50
} 2>&1 | tee $OUT/summary.txt
cp /tmp/l/bench4.log $OUT/ 2>/dev/null
tar czf $OUT/logs.tgz -C /tmp l
