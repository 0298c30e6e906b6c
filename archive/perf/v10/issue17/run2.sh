#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 120 --failure-wait-secs 30 --"
echo "== example 02_cuda_graph (cudarc defaults: tracking on, two streams)"
timeout 130 $R $B/02_cuda_graph --replays 20 2>&1 | tail -8 | tee $OUT/ex02.txt
echo "== example 02 with NCCL-free eager path forced to two-shot"
INTRANODE_ALL_REDUCE_ALGO=two-shot timeout 130 $R $B/02_cuda_graph --replays 5 2>&1 | tail -4
for c in "skip 1 lamport" "skip 0 two-shot" "late 1 one-shot" "late 0 lamport-two-shot" "all-reduce 1 two-shot" "all-reduce 1 lamport"; do
  set -- $c
  echo "== faults --phase $1 --victim $2 --algo $3"
  timeout 100 $R $B/intranode-bench faults --phase $1 --victim $2 --algo $3 --elems 65536 2>&1 | grep -v "^\s*$" | tail -6
  echo "launcher exit: ${PIPESTATUS[0]}"
done 2>&1 | tee $OUT/faults.txt
echo "== check --only-free"
timeout 120 $R $B/intranode-bench check --only-free --free-replays 3 2>&1 | tail -3 | tee $OUT/check.txt
