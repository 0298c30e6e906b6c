#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 200 --failure-wait-secs 30 --"
echo "== gpu_nccl_methods (one rank, NCCL on one GPU)"
INTRANODE_REQUIRE_GPUS=1 timeout 120 $B/test-gpu_nccl_methods --test-threads=1 --nocapture 2>&1 | tail -15 | tee $OUT/gpu_nccl_methods.txt
echo "== check --only-scatter-gather"
timeout 200 $R $B/intranode-bench check --only-scatter-gather 2>&1 | tail -6 | tee $OUT/check_sg.txt
echo "== example 02"
timeout 120 $R $B/02_cuda_graph --replays 10 2>&1 | tail -3 | tee $OUT/ex02.txt
echo "== check --only-free"
timeout 120 $R $B/intranode-bench check --only-free --free-replays 2 2>&1 | tail -3 | tee $OUT/check_free.txt
