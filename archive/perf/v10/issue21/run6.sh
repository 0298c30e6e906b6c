#!/bin/bash
export NCCL_NVLS_ENABLE=0 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_BARRIER_TIMEOUT_MS=2000
B=bundle/new
R="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 200 --failure-wait-secs 30 --"
for c in reduce-scatter all-gather; do
echo "== bench --collective $c (cudarc defaults)"
timeout 200 $R $B/intranode-bench bench --collective $c --cudarc-defaults --calls 64 --large-calls 32 --ks 1,16 --min-bytes 4096 --max-bytes 4194304 --out $OUT/$c 2>&1 | grep -v "done, last" | tail -22 | tee $OUT/bench_$c.txt
done
