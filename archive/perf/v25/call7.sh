#!/bin/bash
# 1 H200, main at aa1e6d4 (kernel images now xz; the cudarc-style
# constructions; Group takes symmetric views): the suite's stress, types
# and recreate stages at 4 ranks under MPS with set-up times (the xz
# unpack on a GPU machine), 04_from_rank at 4 ranks under MPS,
# 05_from_devices at 2 and 4 ranks on GPU 0 (cudarc's defaults), and once
# reading back before waiting (does the health check then name a wait
# that ran out?).
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new; unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
go() { local tag=$1 to=$2; shift 2; local t0=$SECONDS
  timeout $to "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'passed|ok \(|checked|lost|rror|got |never|set-up: total' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | grep -v 'Drop\|INVALIDATED' | head -4 | cut -c1-400)"; }
R="/tmp/new/intranode-run --mps --failure-wait-secs 5 --timeout 150 --nproc-per-node 4 --gpus 0,0,0,0 --"
{
INTRANODE_TIMING=1 go stress4 170 $R /tmp/new/intranode-suite check --only-stress --stress-calls 300
go types4 100 $R /tmp/new/intranode-suite check --only-types
go recreate4 100 $R /tmp/new/intranode-suite recreate
go fr4 160 /tmp/new/intranode-run --mps --timeout 150 --nproc-per-node 1 --gpus 0 -- /tmp/ex/04_from_rank --gpus 0,0,0,0
go fd4 60 /tmp/ex/05_from_devices --gpus 0,0,0,0 --eager 20 --replays 100
go fd2 60 /tmp/ex/05_from_devices --gpus 0,0 --eager 20 --replays 100 --hidden 300000
go fd4_readback_first 60 /tmp/ex/05_from_devices --gpus 0,0,0,0 --eager 5 --replays 0 --read-back-first
} 2>&1 | tee $OUT/summary.txt
grep -h "set-up" /tmp/l/stress4.log | head -4 >> $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
