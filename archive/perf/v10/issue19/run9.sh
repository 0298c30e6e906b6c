#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
echo "== check --only-norm, 2 ranks sharing the GPU (our all-reduce)"
INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 timeout 200 $B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 190 -- $B/intranode-bench check --only-norm 2>&1 | tail -4
echo "== check --only-norm, 1 rank (NCCL all-reduce, module loaded by the communicator)"
timeout 120 $B/intranode-run --nproc-per-node 1 --timeout 110 -- $B/intranode-bench check --only-norm 2>&1 | tail -4
