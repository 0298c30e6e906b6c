#!/bin/bash
# 1 H200: call 1's recreate stage (4 ranks under MPS lost 216 MiB and 300
# descriptors in 50 cycles) again, now that NCCL is not started where
# ranks share a GPU; and the types stage, which reports NCCL's reason.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/new /tmp/new
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000
go() { # tag mode n timeout args...
  local tag=$1 mode=$2 n=$3 to=$4; shift 4
  local g=$(seq -s, 0 $((n-1)) | sed 's/[0-9]\+/0/g') t0=$SECONDS m=""
  [ $mode = mps ] && m=--mps
  timeout $((to+10)) /tmp/new/intranode-run $m --failure-wait-secs 5 --timeout $to --nproc-per-node $n --gpus $g -- /tmp/new/intranode-suite "$@" > /tmp/l/$tag.log 2>&1
  local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'rank 0.*(lost|cycles|ok)|rror' /tmp/l/$tag.log | head -4 | cut -c1-420)"
}
{
go recreate4 mps 4 100 recreate
go recreate2_ts ts 2 100 recreate
go types4 mps 4 60 check --only-types
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
