#!/bin/bash
# 1 H200. (a) the schedule fuzzer's build (INTRANODE_SCHEDULE_FUZZ=1,
# machine code) at 4 ranks under MPS: free-running ~1e5 calls checked on
# the GPU, graph, hog, back-to-back, scatter-gather, norm; (b)
# compute-sanitizer memcheck and racecheck around each of 2 time-sliced
# ranks, every form; (c) 4 ranks time-sliced, graph stage.
set -u
B=bundle2
BUDGET=${BUDGET:-420}
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack $B/new /tmp/new; unpack $B/fuzz /tmp/fuzz; cp /tmp/new/intranode-run /tmp/fuzz/
CS=$(which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000
go() { # tag mode build n limit_s -- suite args...
  local tag=$1 mode=$2 b=$3 n=$4 lim=$5; shift 6
  local g=$(seq -s, 0 $((n-1)) | sed 's/[0-9]\+/0/g')
  [ $SECONDS -gt $BUDGET ] && { echo "$tag skipped"; return; }
  local t0=$SECONDS m="" pre=""
  [ $mode = mps ] && m=--mps
  [ $mode = cs-memcheck ] && pre="$CS --tool memcheck --report-api-errors no --print-limit 10 --error-exitcode 9"
  [ $mode = cs-racecheck ] && pre="$CS --tool racecheck --print-limit 10 --error-exitcode 9"
  timeout $((lim+10)) /tmp/$b/intranode-run $m --failure-wait-secs 5 --timeout $lim --nproc-per-node $n --gpus $g -- \
    $pre /tmp/$b/intranode-suite check "$@" > /tmp/l/$tag.log 2>&1
  local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'check rank 0|got |never came|ran out|rror|ERROR SUMMARY' /tmp/l/$tag.log | grep -v 'per GPU at most' | head -3 | cut -c1-420)"
}
{
go fuzz4_free mps fuzz 4 90 -- --only-free --free-replays 180
go fuzz4_graph mps fuzz 4 60 -- --only-graph --graph-replays 100
go fuzz4_hog mps fuzz 4 60 -- --only-hog --hog-rounds 10
go fuzz4_stress mps fuzz 4 60 -- --only-stress --stress-calls 300
go fuzz4_sg mps fuzz 4 50 -- --only-scatter-gather
go fuzz4_norm mps fuzz 4 50 -- --only-norm
go cs_memcheck cs-memcheck new 2 90 -- --only-stress --stress-calls 20
go cs_racecheck cs-racecheck new 2 90 -- --only-stress --stress-calls 10
go ts4_graph ts new 4 60 -- --only-graph --graph-replays 10
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
