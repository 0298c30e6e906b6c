#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 150 --failure-wait-secs 30 --"
nvidia-smi -L
echo "== lined-up bench (final kernels), Lamport forms and one-shot"
timeout 100 $R $B/intranode-bench bench --aligned --min-bytes 262144 --max-bytes 1048576 --graph-only --repeats 3 --algos lamport,lamport-two-shot,one-shot --out $OUT/al 2>&1 | grep -v "done, last" | tail -14 | tee $OUT/aligned.txt
echo "== free bench, cudarc defaults (event tracking on)"
timeout 150 $R $B/intranode-bench bench --cudarc-defaults --calls 160 --large-calls 80 --ks 1,16 --min-bytes 65536 --max-bytes 1048576 --algos lamport,two-shot,auto --out $OUT/free 2>&1 | grep -v "done, last" | tail -40 | tee $OUT/free_tracked.txt
echo "== example 02_cuda_graph"
timeout 120 $R $B/02_cuda_graph --replays 20 2>&1 | tail -4 | tee $OUT/ex02.txt
echo "== example 01_data_parallel"
timeout 120 $R $B/01_data_parallel --steps 40 2>&1 | tail -4 | tee $OUT/ex01.txt
for c in "skip 1 lamport" "late 0 two-shot" "all-reduce 1 lamport-two-shot" "barrier 0 one-shot"; do
  set -- $c
  echo "== faults --phase $1 --victim $2 --algo $3"
  timeout 100 $R $B/intranode-bench faults --phase $1 --victim $2 --algo $3 --elems 65536 2>&1 | grep "PASS\|FAIL\|error" | tail -4
  echo "launcher exit: ${PIPESTATUS[0]}"
done 2>&1 | tee $OUT/faults.txt
echo "== check (reduced counts)"
timeout 200 $R $B/intranode-bench check --stress-calls 300 --graph-replays 20 --free-replays 3 2>&1 | grep -v "done, last\|sweep:" | tail -8 | tee $OUT/check.txt
