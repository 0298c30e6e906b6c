#!/bin/bash
# 1 H200: the cudarc-style constructions. 04_from_rank (rank 0 makes the
# Id, starts the other ranks as processes, every rank Comm::from_rank;
# a sweep of sizes out of place and in place, bf16 and f32, then a layer
# loop of out-of-place bf16 all-reduces into fresh outputs), 2 and 4
# ranks on GPU 0, under MPS and time-sliced; 05_from_devices (one process,
# a thread per rank, in-place bf16 captured into a graph and replayed),
# 2 and 4 ranks on GPU 0 (one context: concurrent without MPS), with
# every form forced in turn; and the suite's types stage, which reports
# the path.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000
go() { # tag timeout cmd...
  local tag=$1 to=$2; shift 2
  local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1
  local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'passed|checked|rror|got |never' /tmp/l/$tag.log | head -3 | cut -c1-400)"
}
R="/tmp/new/intranode-run --mps --timeout 150 --nproc-per-node 1 --gpus 0 --"
{
go fr2_mps 160 $R /tmp/ex/04_from_rank --gpus 0,0
go fr4_mps 160 $R /tmp/ex/04_from_rank --gpus 0,0,0,0
go fr2_ts 100 /tmp/ex/04_from_rank --gpus 0,0 --steps 3
go fd2 100 /tmp/ex/05_from_devices --gpus 0,0
go fd4 100 /tmp/ex/05_from_devices --gpus 0,0,0,0
for a in lamport lamport-two-shot one-shot two-shot push; do
  INTRANODE_ALL_REDUCE_ALGO=$a go fd4_$a 100 /tmp/ex/05_from_devices --gpus 0,0,0,0 --replays 20 --hidden 300000
done
INTRANODE_ALL_REDUCE_ALGO=one-shot go fr4_mps_oneshot 160 $R /tmp/ex/04_from_rank --gpus 0,0,0,0 --steps 5
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
