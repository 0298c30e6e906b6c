#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 250 --failure-wait-secs 30 --"
echo "== ddp-check"
timeout 260 $R $B/intranode-bench ddp-check 2>&1 | grep -v "done, last" | tail -6 | tee $OUT/ddp_check.txt
echo "== bad-input"
timeout 120 $R $B/intranode-bench bad-input 2>&1 | tail -4 | tee $OUT/bad_input.txt
echo "== soak"
timeout 200 $R $B/intranode-bench soak --calls 3000 --seed 7 2>&1 | grep -v "done, last" | tail -4 | tee $OUT/soak.txt
echo "== malformed switch"
INTRANODE_ALL_REDUCE_ALGO=lamprot timeout 60 $R $B/intranode-bench check --only-free --free-replays 1 2>&1 | tail -3 | tee $OUT/malformed.txt
