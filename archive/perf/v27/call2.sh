#!/bin/bash
# 1 H200, main after the kernel renames (lamport_two_shot, push_scatter_gather,
# index, packed) and the test kernels' own crate (test PTX rebuilt, entries
# reordered): the suite's full check at 4 ranks under MPS, a soak (the soak
# kernels), the Lamport phase probes (intranode-bench phases, the timing
# kernels), poll-storm, the decode benchmark (the fill kernels), a short
# free-running bench at 4 ranks, and the examples (02 loads the test PTX).
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000 INTRANODE_REQUIRE_GPUS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(passed|ok|checked|lost|cycles|PASS)|PASS|FAIL|rror|got |never|loss|exact|checked' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -4 | cut -c1-300)"; }
R=/tmp/new/intranode-run
M() { local tag=$1 to=$2 n=$3; shift 3; local g=$(printf '0,%.0s' $(seq $n)); g=${g%,}; go $tag $to $R --mps --failure-wait-secs 5 --timeout $((to-10)) --nproc-per-node $n --gpus $g -- "$@"; }
{
M check4 290 4 /tmp/new/intranode-suite check
M soak4 60 4 /tmp/new/intranode-suite soak --calls 20000 --sample-every 5000
M phases2 60 2 /tmp/new/intranode-bench phases --bytes 1024,65536,1048576
go poll1 40 /tmp/new/intranode-bench poll-storm
M decode2 100 2 /tmp/new/intranode-bench decode --models llama3-8b --batches 1,8
M bench4 120 4 /tmp/new/intranode-bench bench --ks 16 --graph-only --no-decode --large-calls 20
go graph1 30 $R --timeout 20 --nproc-per-node 1 --gpus 0 -- /tmp/ex/02_cuda_graph
go fr4 60 $R --mps --timeout 50 --nproc-per-node 1 --gpus 0 -- /tmp/ex/04_from_rank --gpus 0,0,0,0 --steps 5 --replays 50
go fd4 40 /tmp/ex/05_from_devices --gpus 0,0,0,0 --eager 20 --replays 50
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
