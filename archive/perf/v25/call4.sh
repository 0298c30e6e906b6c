#!/bin/bash
# 1 H200: why 05_from_devices with 4 ranks on GPU 0 (one process, one
# context) read wrong data in call 3 while 2 ranks passed: eager calls
# only (no capture), 2/3/4 ranks, with and without cudarc's event
# tracking, the legacy IPC backend, more hardware queues.
set -u
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack bundle2/ex /tmp/ex
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
go() { local tag=$1; shift; local t0=$SECONDS
  timeout 60 "$@" > /tmp/l/$tag.log 2>&1; local rc=$?
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'passed|rror|got ' /tmp/l/$tag.log | sed 's/\x1b\[[0-9;]*m//g' | head -3 | cut -c1-300)"; }
E="/tmp/ex/05_from_devices --replays 0"
{
go fd2_e200 $E --gpus 0,0 --eager 200
go fd3_e50 $E --gpus 0,0,0 --eager 50
go fd4_e50 $E --gpus 0,0,0,0 --eager 50
go fd4_e50_noet $E --gpus 0,0,0,0 --eager 50 --no-event-tracking
INTRANODE_SYMM_MEM_BACKEND=cuda-ipc go fd4_ipc $E --gpus 0,0,0,0 --eager 5
CUDA_DEVICE_MAX_CONNECTIONS=32 go fd4_conn32 $E --gpus 0,0,0,0 --eager 50
INTRANODE_ALL_REDUCE_ALGO=one-shot go fd4_oneshot_e50 $E --gpus 0,0,0,0 --eager 50
INTRANODE_ALL_REDUCE_ALGO=one-shot go fd3_oneshot_e50 $E --gpus 0,0,0 --eager 50
RUST_LOG=intranode=debug go fd4_debug $E --gpus 0,0,0,0 --eager 2
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
