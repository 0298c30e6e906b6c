#!/bin/bash
# 1 H200, the same bundle as call 2 (main at 48b1508): the check stages
# call 2's full check did not reach before its 290 s bound (free-running
# stress, barriers), the graph stage at 8 ranks, and again at 4 ranks what
# the later commits touched (bad input through the suite's all-reduce,
# ddp-check, recreate, symm_check).
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000 INTRANODE_REQUIRE_GPUS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(passed|ok|checked|lost|cycles|PASS)|PASS|FAIL|rror|got |never' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -3 | cut -c1-300)"; }
R=/tmp/new/intranode-run
M() { local tag=$1 to=$2 n=$3; shift 3; local g=$(printf '0,%.0s' $(seq $n)); g=${g%,}; go $tag $to $R --mps --failure-wait-secs 5 --timeout $((to-10)) --nproc-per-node $n --gpus $g -- "$@"; }
{
M free4 60 4 /tmp/new/intranode-suite check --only-free
M barriers4 60 4 /tmp/new/intranode-suite check --only-barriers
M graph8 170 8 /tmp/new/intranode-suite check --only-graph
go bad2 40 $R --failure-wait-secs 5 --timeout 30 --nproc-per-node 2 --gpus 0,0 -- /tmp/new/intranode-suite bad-input
M ddp4 60 4 /tmp/new/intranode-suite ddp-check
M recreate4 60 4 /tmp/new/intranode-suite recreate
M symm4 50 4 /tmp/new/symm_check --cycles 5
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
