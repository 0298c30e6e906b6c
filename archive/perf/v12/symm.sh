#!/bin/bash
# Issue 28 item 2 (branch symm): symmetric buffers users allocate
# (`Communicator::alloc_symmetric`), on 2 GPUs (NV18).
#   archive/perf/v12/symm.sh BUNDLE_DIR
# BUNDLE_DIR holds the gzipped release binaries intranode-run,
# intranode-suite, intranode-bench and 03_symmetric. Writes only under
# $OUT. About 4-5 minutes: the first process compiles the PTX for the GPU
# (~50 s); CUDA_CACHE_PATH keeps that for the later ones.
set -u
: "${OUT:?set OUT to the output directory}"
SRC=${1:?usage: symm.sh BUNDLE_DIR}
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_PATH=/tmp/cuda-cache INTRANODE_BARRIER_TIMEOUT_MS=10000
B=/tmp/bsymm
mkdir -p "$B" "$OUT" "$CUDA_CACHE_PATH"
for f in "$SRC"/*.gz; do
  n=$(basename "$f" .gz); gunzip -c "$f" > "$B/$n"; chmod +x "$B/$n"
done
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 15"
nvidia-smi -L
nvidia-smi topo -m | head -4

echo "== 1. example 03_symmetric: cuBLAS GEMM into a symmetric buffer, all-reduce in place and from a view (auto; first run JIT-compiles the PTX)"
timeout 170 $R --timeout 160 -- "$B/03_symmetric" 2>&1 | tail -3
for a in one-shot two-shot; do
  echo "== 1b. 03_symmetric with INTRANODE_ALL_REDUCE_ALGO=$a (reads the peers' GEMM outputs in place)"
  INTRANODE_ALL_REDUCE_ALGO=$a timeout 60 $R --timeout 50 -- "$B/03_symmetric" --steps 10 --tokens 64 --hidden 4096 2>&1 | tail -2
done

echo "== 2. suite: check --only-symmetric (every algorithm, type, op, in place/out of place, views at offsets, back to back, graph, mismatched lengths)"
INTRANODE_REQUIRE_GPUS=2 timeout 150 $R --timeout 140 -- "$B/intranode-suite" check --only-symmetric 2>&1 | grep -v "done, last" | tail -6

echo "== 3. bench --symmetric: 1 KiB-1 MiB bf16, free-running graph replay; <algo>+sym rows beside the regular rows and NCCL"
timeout 200 $R --timeout 190 -- "$B/intranode-bench" bench --symmetric \
  --min-bytes 1024 --max-bytes 1048576 --ks 16,128 --graph-only --no-decode --no-skew \
  --calls 4000 --algos lamport,lamport-two-shot,one-shot,two-shot,nccl,auto \
  --out "$OUT/bench_symm" > "$OUT/bench_symm.log" 2>&1
echo "rc $?"
grep -v "done, last" "$OUT/bench_symm.log" | tail -n 130
echo "== done"
