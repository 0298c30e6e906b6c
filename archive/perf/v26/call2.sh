#!/bin/bash
# 1 H200, main after the re-layout (intra/, decide/, one all-reduce road,
# launch parameters worked out at the rendezvous): the suite's full check
# at 4 ranks under MPS and at 8 ranks under MPS (30 s bound), symm_check,
# bad input, and the examples as users run them.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000 INTRANODE_REQUIRE_GPUS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'passed|PASS|ok|checked|rror|got |never|loss' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -6 | cut -c1-300)"; }
R=/tmp/new/intranode-run
{
go check4 260 $R --mps --failure-wait-secs 5 --timeout 250 --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/new/intranode-suite check
go symm4 60 $R --mps --failure-wait-secs 5 --timeout 50 --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/new/symm_check --cycles 5
go bad2 60 $R --failure-wait-secs 5 --timeout 50 --nproc-per-node 2 --gpus 0,0 -- /tmp/new/intranode-suite bad-input
go dp1 60 $R --timeout 50 --nproc-per-node 1 --gpus 0 -- /tmp/ex/01_data_parallel
go graph1 60 $R --timeout 50 --nproc-per-node 1 --gpus 0 -- /tmp/ex/02_cuda_graph
go fr4 160 $R --mps --timeout 150 --nproc-per-node 1 --gpus 0 -- /tmp/ex/04_from_rank --gpus 0,0,0,0 --steps 5 --replays 50
go fd4 60 /tmp/ex/05_from_devices --gpus 0,0,0,0 --eager 20 --replays 50
INTRANODE_BARRIER_TIMEOUT_MS=30000 go check8 230 $R --mps --failure-wait-secs 5 --timeout 220 --nproc-per-node 8 --gpus 0,0,0,0,0,0,0,0 -- /tmp/new/intranode-suite check --only-graph
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
