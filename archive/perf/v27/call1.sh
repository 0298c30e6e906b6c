#!/bin/bash
# 1 H200, main after the all-reduce road's re-layout (intra/launch.rs,
# RawAllReduce) and the suites on the public API + a named internals
# surface: the suite's full check at 4 ranks under MPS, ddp-check, a short
# soak, bad input, recreate, symm_check, poll-storm, the examples as users
# run them, and the lamport fault cases at 2 ranks.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000 INTRANODE_REQUIRE_GPUS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(passed|ok|checked|lost|cycles|PASS)|PASS|FAIL|rror|got |never|loss' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -4 | cut -c1-300)"; }
R=/tmp/new/intranode-run
S() { local tag=$1 to=$2; shift 2; go $tag $to $R --mps --failure-wait-secs 5 --timeout $((to-10)) --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/new/intranode-suite "$@"; }
{
S check4 290 check
S ddp4 80 ddp-check
S soak4 70 soak --calls 20000 --sample-every 5000
S recreate4 60 recreate
go symm4 60 $R --mps --failure-wait-secs 5 --timeout 50 --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/new/symm_check --cycles 5
go bad2 40 $R --failure-wait-secs 5 --timeout 30 --nproc-per-node 2 --gpus 0,0 -- /tmp/new/intranode-suite bad-input
go poll1 40 /tmp/new/intranode-bench poll-storm
go dp4 60 $R --mps --timeout 50 --nproc-per-node 4 --gpus 0,0,0,0 -- /tmp/ex/01_data_parallel --hook bf16
go fr4 60 $R --mps --timeout 50 --nproc-per-node 1 --gpus 0 -- /tmp/ex/04_from_rank --gpus 0,0,0,0 --steps 5 --replays 50
go fd4 40 /tmp/ex/05_from_devices --gpus 0,0,0,0 --eager 20 --replays 50
go graph1 30 $R --timeout 20 --nproc-per-node 1 --gpus 0 -- /tmp/ex/02_cuda_graph
go faults2 100 /tmp/new/intranode-suite faults-suite --nproc 2 --only lamport --large false --launcher /tmp/new/intranode-run
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
