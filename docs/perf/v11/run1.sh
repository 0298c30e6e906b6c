#!/bin/bash
# Device run 1 after issue 18's re-layout, the fused norm, the bandwidth
# form and NCCL under capture: one H100, two ranks sharing it (correctness
# only: time slices of ~2.3 ms), and a world of one for NCCL.
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=3000
B=bundle/new
SHARE="env INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1"
R2="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 170 --failure-wait-secs 20 --"
R1="$B/intranode-run --nproc-per-node 1 --timeout 170 --"
nvidia-smi -L
echo "== gpu_nccl_methods: NCCL-backed methods in a world of one, eager and captured under event tracking"
INTRANODE_REQUIRE_GPUS=1 timeout 120 $B/gpu_nccl_methods 2>&1 | tail -4
echo "== check --only-norm, two ranks sharing the GPU (fused and unfused, graphs)"
$SHARE timeout 180 $R2 $B/intranode-suite check --only-norm 2>&1 | tail -5
echo "== check --only-norm, one rank (NCCL all-reduce + our norm)"
timeout 120 $R1 $B/intranode-suite check --only-norm 2>&1 | tail -3
echo "== check --algos bandwidth, 256 KiB buffer (multi-round)"
$SHARE INTRANODE_SYMM_MEM_BUFFER_BYTES=262144 timeout 180 $R2 $B/intranode-suite check --algos bandwidth --stress-calls 100 --graph-replays 5 --free-replays 0 2>&1 | grep -v "done, last" | tail -8
echo "== check, every algorithm, reduced counts"
$SHARE timeout 180 $R2 $B/intranode-suite check --stress-calls 100 --graph-replays 5 --free-replays 1 2>&1 | grep -v "done, last" | tail -12
echo "== example 02_cuda_graph (cudarc defaults)"
$SHARE timeout 100 $R2 $B/02_cuda_graph --replays 10 2>&1 | tail -2
echo "== decode, world of one, cudarc defaults: none, nccl (captured under tracking), ours, fused"
timeout 170 $R1 $B/intranode-bench decode --models llama3-8b --batches 1,8 --layers 4 --replays 20 --cudarc-defaults --variants none,nccl,ours,fused --out $OUT/decode_w1 2>&1 | tail -12
echo "== decode, two ranks sharing: none, ours, fused"
$SHARE timeout 170 $R2 $B/intranode-bench decode --models llama3-8b --batches 1 --layers 2 --replays 10 --variants none,ours,fused --out $OUT/decode_w2 2>&1 | tail -10
