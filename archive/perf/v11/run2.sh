#!/bin/bash
# Device run 2: the bandwidth form after its register fix (u32 indices),
# two and three ranks sharing one H100 (correctness only).
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=3000 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1
B=/tmp/bnew; mkdir -p $B; for f in bundle/new/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
for w in 2 3; do
  G=$(seq -s, 0 0 | head -c 1); GPUS=$(printf '0%.0s,' $(seq 1 $w)); GPUS=${GPUS%,}
  echo "== check --algos bandwidth, world $w on one GPU, 256 KiB buffer"
  INTRANODE_SYMM_MEM_BUFFER_BYTES=262144 timeout 250 $B/intranode-run --nproc-per-node $w --gpus $GPUS --timeout 240 --failure-wait-secs 15 -- \
    $B/intranode-suite check --algos bandwidth --stress-calls 60 --graph-replays 3 --free-replays 0 2>&1 | grep -v "done, last" | grep "rank 0" | tail -5
done
