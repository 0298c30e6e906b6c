#!/bin/bash
# v13 run 1 (2 GPUs): issue 29's two GPU checks.
# 1. TorchStore against PyTorch's own TCPStore (libuv and classic servers)
#    and Rust ranks under torchrun (the key-prefix fix queued in
#    docs/perf/queue/torch_store.sh, here from bundle-run1/).
# 2. candle-tp with every back-end (intranode, intranode-fused, nccl) at
#    batch 1, 8, 32 (bundle-candle/ from `cargo xtask candle-example`).
# Run from the repo root; writes only under $OUT.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
B=/tmp/v13-run1
mkdir -p $B
for f in bundle-run1/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$B/$n" && chmod +x "$B/$n"
done
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__)'
echo "== TorchStore against torch's TCPStore, libuv and classic servers"
INTRANODE_REQUIRE_TORCH=1 timeout 150 $B/test-torch_tcpstore --nocapture --test-threads=1 >$OUT/torch_tcpstore.log 2>&1
echo "rc=$?"
tail -12 $OUT/torch_tcpstore.log
echo "== torchrun --standalone: Rust ranks through torch's store"
RUST_LOG=intranode_store=info,warn INTRANODE_REQUIRE_GPUS=2 timeout 120 python3 -m torch.distributed.run --standalone \
    --nproc_per_node 2 --no-python $B/02_cuda_graph --replays 20 >$OUT/torchrun.log 2>&1
echo "rc=$?"
grep -E "protocol|exact|rror|store" $OUT/torchrun.log | head -12
echo "== candle-tp, every back-end"
OUT=$OUT timeout 420 examples/candle-tp/device-run.sh bundle-candle 2 >$OUT/candle.log 2>&1
echo "rc=$?"
grep -E "^candle-tp|^all-reduce|^intranode|^check|^back-end|^none|^nccl|failed" $OUT/candle.log
echo "== done"
