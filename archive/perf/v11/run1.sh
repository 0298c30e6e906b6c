#!/bin/bash
# Device run 1 after issue 18's re-layout, the fused norm, the bandwidth
# form and NCCL under capture: one H100, two ranks sharing it (correctness
# only: time slices of ~2.3 ms), and a world of one for NCCL.
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=3000
B=/tmp/bnew; mkdir -p $B; for f in bundle/new/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
SHARE="env INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1"
R2="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 165 --failure-wait-secs 15 --"
R1="$B/intranode-run --nproc-per-node 1 --timeout 170 --"
nvidia-smi -L
PART=${1:-A}
if [ "$PART" = A ]; then
echo "== gpu_nccl_methods: NCCL-backed methods in a world of one, eager and captured under event tracking"
INTRANODE_REQUIRE_GPUS=1 timeout 90 $B/gpu_nccl_methods 2>&1 | tail -4
echo "== check --only-norm, two ranks sharing the GPU (fused and unfused, graphs)"
$SHARE timeout 130 $R2 $B/intranode-suite check --only-norm 2>&1 | tail -5
echo "== check --only-norm, one rank (NCCL all-reduce + our norm)"
timeout 90 $R1 $B/intranode-suite check --only-norm 2>&1 | tail -3
echo "== check --algos bandwidth, 256 KiB buffer (multi-round)"
$SHARE INTRANODE_SYMM_MEM_BUFFER_BYTES=262144 timeout 170 $R2 $B/intranode-suite check --algos bandwidth --stress-calls 100 --graph-replays 5 --free-replays 0 2>&1 | grep -v "done, last" | tail -8
echo "== example 02_cuda_graph (cudarc defaults)"
$SHARE timeout 100 $R2 $B/02_cuda_graph --replays 10 2>&1 | tail -2
fi
if [ "$PART" = B ]; then
echo "== check, every algorithm, reduced counts"
$SHARE timeout 160 $R2 $B/intranode-suite check --stress-calls 100 --graph-replays 5 --free-replays 1 2>&1 | grep -v "done, last" | tail -12
echo "== decode, world of one, cudarc defaults: none, nccl (captured under tracking), ours, fused"
timeout 150 $R1 $B/intranode-bench decode --models llama3-8b --batches 1,8 --layers 4 --replays 20 --cudarc-defaults --variants none,nccl,ours,fused --out $OUT/decode_w1 2>&1 | tail -12
echo "== decode, two ranks sharing: none, ours, fused"
$SHARE timeout 120 $R2 $B/intranode-bench decode --models llama3-8b --batches 1 --layers 2 --replays 10 --variants none,ours,fused --out $OUT/decode_w2 2>&1 | tail -10
echo "== bench, free-running, event tracking on, 64 KiB-1 MiB (two ranks sharing: time slices, correctness of the timed calls)"
$SHARE timeout 120 $R2 $B/intranode-bench bench --cudarc-defaults --calls 64 --ks 1 --no-decode --no-skew --min-bytes 65536 --max-bytes 1048576 --algos lamport,bandwidth,auto --out $OUT/bench 2>&1 | grep -i "tail:\|auto within\|wrong\|error\|exact" | tail -8
fi
