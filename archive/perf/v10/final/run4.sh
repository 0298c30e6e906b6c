#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 150 --failure-wait-secs 30 --"
echo "== example 02_cuda_graph"
timeout 120 $R $B/02_cuda_graph --replays 20 2>&1 | tail -6 | tee $OUT/ex02.txt
echo "== free bench, cudarc defaults (event tracking on)"
timeout 200 $R $B/intranode-bench bench --cudarc-defaults --calls 160 --large-calls 80 --ks 1,16 --min-bytes 65536 --max-bytes 1048576 --algos lamport,two-shot,auto --out $OUT/free 2>&1 | grep -v "done, last" | tail -30 | tee $OUT/free_tracked.txt
echo "== decode mode, cudarc defaults, auto only"
timeout 200 $R $B/intranode-bench bench --cudarc-defaults --calls 32 --ks 16 --no-skew --graph-only --min-bytes 65536 --max-bytes 65536 --algos auto --out $OUT/dec 2>&1 | grep -v "done, last" | tail -22 | tee $OUT/decode_tracked.txt
