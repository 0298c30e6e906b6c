#!/bin/bash
# v14 (issue 35, branch publish): the PTX load path now passes
# CU_JIT_MAX_REGISTERS=128 (cuModuleLoadDataEx) to the driver's JIT.
# Nothing else in the GPU code changed (the sm_90 PTX and cubin are byte
# for byte those of 46eeda2). This exercises the changed path on 2 GPUs:
# the cubin path as before, then the PTX JIT path with an empty driver
# cache (about 50 s of JIT), each with 02_cuda_graph.
# Build here (the device bundle leaves the PTX out, INTRANODE_EMBED_PTX=0,
# so it cannot take the PTX path), from the repo root:
#   cargo build --release --locked -p intranode-launcher --bin intranode-run
#   cargo build --release --locked -p intranode-examples --example 02_cuda_graph
#   mkdir -p bundle-jit && for b in target/release/intranode-run \
#       target/release/examples/02_cuda_graph; do
#       strip -o /tmp/s "$b" && gzip -c /tmp/s >bundle-jit/$(basename "$b").gz; done
# Run on 2 GPUs, from the repo root: OUT=DIR archive/perf/v14/jit_cap.sh
# Expect "rc=0" twice, the set-up line naming "cubin sm_90" then
# "ptx sm_90", the exactness line of each, and no "rror".
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=2
N=/tmp/v14-jit
mkdir -p $N
for f in bundle-jit/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$N/$n" && chmod +x "$N/$n"
done
R="$N/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
nvidia-smi -L
for image in cubin ptx; do
    echo "== $image: 02_cuda_graph, empty driver cache"
    INTRANODE_KERNEL_IMAGE=$image CUDA_CACHE_PATH=$(mktemp -d) INTRANODE_TIMING=1 \
        timeout 240 $R 230 -- $N/02_cuda_graph --replays 10 >$OUT/${image}_02.log 2>&1
    echo "rc=$?"
    grep -E "set-up|exact|cubin|ptx|rror" $OUT/${image}_02.log | head -6
done
