#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=3000
B=bundle
nvidia-smi -L
echo "== poll-storm (new binary)"
timeout 60 $B/new/intranode-bench poll-storm 2>&1 | tee $OUT/poll_storm.txt
R="$B/new/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 100 --"
echo "== old binary, lined-up bench, 2 ranks sharing the GPU"
timeout 110 $R $B/old/intranode-bench bench --min-bytes 262144 --max-bytes 1048576 --graph-only --repeats 3 --out $OUT/old 2>&1 | tail -25 | tee $OUT/old.txt
echo "== new binary, lined-up bench"
timeout 110 $R $B/new/intranode-bench bench --aligned --min-bytes 262144 --max-bytes 1048576 --graph-only --repeats 3 --out $OUT/newal 2>&1 | tail -25 | tee $OUT/newal.txt
echo "== new binary, free-running bench"
timeout 110 $R $B/new/intranode-bench bench --calls 200 --large-calls 100 --ks 1,16 --no-decode --min-bytes 262144 --max-bytes 1048576 --out $OUT/newfree 2>&1 | tail -40 | tee $OUT/newfree.txt
echo "== new binary, check --only-free"
timeout 110 $R $B/new/intranode-bench check --only-free --free-replays 3 2>&1 | tail -20 | tee $OUT/check.txt
