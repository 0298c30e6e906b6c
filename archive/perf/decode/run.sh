#!/bin/bash
# Device run 2 (merged code): world 1 (every variant); world 1 and 2 with
# cudarc's event tracking on (NCCL routes skipped with a note); two ranks
# sharing the GPU (none, ours; time-sliced).
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle-decode
nvidia-smi -L
echo "== decode, world 1"
timeout 140 $B/intranode-run --nproc-per-node 1 --timeout 130 -- $B/intranode-bench decode --out $OUT/w1 > $OUT/w1.log 2>&1; echo "rc=$?"; grep "op by op" $OUT/w1.log
(
echo "== decode, world 1, event tracking on (8B, batch 1 and 8)"
timeout 40 $B/intranode-run --nproc-per-node 1 --timeout 35 -- $B/intranode-bench decode --models llama3-8b --batches 1,8 --cudarc-defaults --out /tmp/w1t 2>&1 | grep -v "^\[0\] $"
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1
echo "== decode, 2 ranks on one GPU, event tracking on (8B, batch 1 and 8)"
timeout 40 $B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 35 -- $B/intranode-bench decode --variants none,nccl,ours --replays 30 --models llama3-8b --batches 1,8 --cudarc-defaults --out /tmp/w2t 2>&1 | grep "decode:\|rror"
) > $OUT/tracking.log 2>&1
cat $OUT/tracking.log
echo "== decode, 2 ranks on one GPU (none, ours), time-sliced"
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1
timeout 90 $B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 85 -- $B/intranode-bench decode --variants none,ours --replays 30 --out $OUT/w2 > $OUT/w2.log 2>&1; echo "rc=$?"
cat $OUT/w1/decode_w1.md $OUT/w2/decode_w2.md
