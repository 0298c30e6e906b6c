#!/bin/bash
# 1 H200: 04_from_rank with its captured decode step (out-of-place bf16
# all-reduces into outputs allocated inside the graph), 2 and 4 ranks on
# GPU 0 under MPS, cudarc's defaults; NCCL's arm (--backend cudarc) needs
# a GPU per rank: queued.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'passed|checked|rror|got |never' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -5 | cut -c1-400)"; }
M="/tmp/new/intranode-run --mps --timeout 150 --nproc-per-node 1 --gpus 0 --"
{
go fr2 160 $M /tmp/ex/04_from_rank --gpus 0,0 --steps 5 --replays 100
go fr4 160 $M /tmp/ex/04_from_rank --gpus 0,0,0,0 --steps 5 --replays 100
go fr2_cudarc_refused 60 /tmp/ex/04_from_rank --gpus 0,0 --backend cudarc --steps 1 --replays 1
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
