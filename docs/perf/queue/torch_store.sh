#!/bin/bash
# Queued (v12, 2026-11-26): the device time ran out before the fix of
# TorchStore's key prefix could be run where torch is installed.
# The session's diagnosis (2 H200, PyTorch 2.11, a logging proxy between
# the test and torch's libuv TCPStore) showed the Rust client waiting on
# "py/hello" while Python had set "/py/hello": PyTorch's client puts "/"
# before every key. TorchStore now does too (TORCH_KEY_PREFIX); this
# checks it against the real server (both back-ends) and under torchrun.
# Run from the repo root with `cargo xtask device-bundle` output in
# bundle/; writes only under $OUT; about 2 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
B=/tmp/torch-store-bin
sh bundle/unpack.sh $B > /dev/null
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__)'
echo "== TorchStore against torch's TCPStore, libuv and classic servers"
INTRANODE_REQUIRE_TORCH=1 timeout 150 $B/test-torch_tcpstore --nocapture --test-threads=1 2>&1 | tee $OUT/torch_tcpstore.log | tail -12
echo "== torchrun --standalone: Rust ranks through torch's store"
RUST_LOG=intranode_store=info,warn INTRANODE_REQUIRE_GPUS=1 timeout 90 python3 -m torch.distributed.run --standalone \
    --nproc_per_node 2 --no-python $B/02_cuda_graph --replays 20 2>&1 | tee $OUT/torchrun.log | grep -E "protocol|exact|rror" | head -6
echo "== done"
