#!/bin/bash
# Device run 3: launch overlap (programmatic dependent launch) on, the
# default; one H100. The suite's graphs and back-to-back calls, the decode
# stack (GEMM -> all-reduce, where the overlap happens) with it on and off.
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=3000
B=/tmp/bnew; mkdir -p $B; for f in bundle/new/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
SHARE="env INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1"
R2="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 165 --failure-wait-secs 15 --"
R1="$B/intranode-run --nproc-per-node 1 --timeout 120 --"
echo "== check, every algorithm, reduced counts, overlap on"
$SHARE timeout 170 $R2 $B/intranode-suite check --stress-calls 100 --graph-replays 5 --free-replays 1 2>&1 | grep -v "done, last" | grep "rank 0" | tail -6
echo "== example 02_cuda_graph, overlap on"
$SHARE timeout 90 $R2 $B/02_cuda_graph --replays 10 2>&1 | tail -1
echo "== gpu_nccl_methods"
INTRANODE_REQUIRE_GPUS=1 timeout 60 $B/gpu_nccl_methods 2>&1 | grep 'test result'
for o in 1 0; do
  echo "== decode, two ranks sharing, INTRANODE_LAUNCH_OVERLAP=$o"
  $SHARE INTRANODE_LAUNCH_OVERLAP=$o timeout 100 $R2 $B/intranode-bench decode --models llama3-8b --batches 1 --layers 2 --replays 10 --variants none,ours,fused --out $OUT/decode_pdl$o 2>&1 | grep '| llama' | tail -3
done
