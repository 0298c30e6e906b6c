#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 280 --failure-wait-secs 30 --"
echo "== example 02_cuda_graph (cudarc defaults)"
timeout 120 $R $B/02_cuda_graph --replays 20 2>&1 | tail -2
for c in "skip 1 lamport" "late 0 two-shot" "all-reduce 1 lamport-two-shot"; do
  set -- $c
  echo "== faults --phase $1 --victim $2 --algo $3"
  timeout 100 $R $B/intranode-bench faults --phase $1 --victim $2 --algo $3 --elems 65536 2>&1 | grep "PASS\|FAIL\|rror" | tail -3
done
echo "== free bench, cudarc defaults, all-reduce 64 KiB-1 MiB"
timeout 150 $R $B/intranode-bench bench --cudarc-defaults --calls 96 --ks 1,16 --no-decode --min-bytes 65536 --max-bytes 1048576 --algos lamport,two-shot,auto --out /tmp/b 2>&1 | grep "tail:\|auto within\|wrong"
echo "== check (reduced counts: sweep, stress, graphs, free-running, norm, reduce-scatter/all-gather, barriers)"
timeout 290 $R $B/intranode-bench check --stress-calls 300 --graph-replays 20 --free-replays 2 2>&1 | grep -v "done, last\|sweep:" | tail -12
