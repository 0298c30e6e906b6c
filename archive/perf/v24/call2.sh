#!/bin/bash
# 1 H200. (a) 8 ranks under MPS, the back-to-back stage that timed out in
# call 1 with a 5 s bound, again with 5 s and with 30 s (host lag or a
# GPU deadlock?), and the 8-rank stages call 1 did not reach; (b) the
# schedule fuzzer's build (INTRANODE_SCHEDULE_FUZZ=1) at 4 and 2 ranks
# under MPS; (c) 4 and 2 ranks time-sliced (no MPS).
set -u
B=bundle2
BUDGET=${BUDGET:-500}
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack $B/new /tmp/new; unpack $B/fuzz /tmp/fuzz; cp /tmp/new/intranode-run /tmp/fuzz/
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0
go() { # mode build n stage bound_ms extra...
  local mode=$1 b=$2 n=$3 st=$4 ms=$5; shift 5
  local g=$(seq -s, 0 $((n-1)) | sed 's/[0-9]\+/0/g')
  local tag=${mode}_${b}_n${n}_${st}_${ms}
  [ $SECONDS -gt $BUDGET ] && { echo "$tag skipped"; return; }
  local t0=$SECONDS m=""
  [ $mode = mps ] && m=--mps
  INTRANODE_BARRIER_TIMEOUT_MS=$ms timeout 130 /tmp/$b/intranode-run $m --failure-wait-secs 5 --timeout 120 --nproc-per-node $n --gpus $g -- \
    /tmp/$b/intranode-suite check --only-$st --stress-calls 300 --graph-replays 100 --free-replays 20 --hog-rounds 10 "$@" > /tmp/l/$tag.log 2>&1
  local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'check rank 0|got |never came|ran out|rror' /tmp/l/$tag.log | grep -v 'per GPU at most' | head -2 | cut -c1-420)"
}
{
go mps new 8 stress 30000
go mps new 8 stress 5000
for st in symmetric types hog barriers; do go mps new 8 $st 5000; done
go mps fuzz 4 free 10000 --free-replays 200
go mps fuzz 4 graph 10000
go mps fuzz 4 hog 10000
go mps fuzz 4 scatter-gather 10000
go mps fuzz 4 norm 10000
go mps fuzz 2 free 10000 --free-replays 100
go mps fuzz 4 stress 10000
go ts new 4 graph 10000 --graph-replays 10
go ts new 2 stress 10000 --stress-calls 100
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
