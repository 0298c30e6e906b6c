#!/bin/bash
# Ranks sharing one H200 under MPS (intranode-run --mps, a fresh daemon per
# job): the build before the fix (7680d9f + the new suite) for evidence,
# then the fix at N = 4, 2, 8 through every check stage; then 4 ranks
# time-sliced.
set -u
B=bundle2
BUDGET=${BUDGET:-520}
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack $B/new /tmp/new; unpack $B/old /tmp/old
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=5000 NCCL_NVLS_ENABLE=0
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,compute_mode --format=csv
go() { # mps|ts build n stage extra...
  local mode=$1 b=$2 n=$3 st=$4; shift 4
  local g=$(seq -s, 0 $((n-1)) | sed 's/[0-9]\+/0/g')
  local tag=${mode}_${b}_n${n}_${st}
  [ $SECONDS -gt $BUDGET ] && { echo "$tag skipped"; return; }
  local t0=$SECONDS m=""
  [ $mode = mps ] && m=--mps
  timeout 100 /tmp/$b/intranode-run $m --failure-wait-secs 5 --timeout 80 --nproc-per-node $n --gpus $g -- \
    /tmp/$b/intranode-suite check --only-$st --stress-calls 300 --graph-replays 100 --free-replays 20 --hog-rounds 10 "$@" > /tmp/l/$tag.log 2>&1
  local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'check rank 0|got |never came|ran out|rror' /tmp/l/$tag.log | grep -v 'per GPU at most' | head -2 | cut -c1-420)"
}
{
go mps old 4 graph --algos two-shot
go mps old 4 hog
for n in 4 2 8; do
  for st in stress graph free norm scatter-gather symmetric types hog barriers; do
    go mps new $n $st
  done
done
go ts new 4 graph --graph-replays 10
} 2>&1 | tee $OUT/summary.txt
grep -h "per GPU at most" /tmp/l/mps_new_n*_graph.log | head -3 >> $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
