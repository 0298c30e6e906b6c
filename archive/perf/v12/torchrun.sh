#!/bin/bash
# Issue 29, items 4 and 5 on a GPU machine with PyTorch (no Rust needed):
# Rust ranks started by torchrun rendezvous through torch's own TCPStore
# (intranode_store::TorchStore, chosen by intranode_dist_env::StoreChoice),
# and the all-reduce is right; the store client round-trips every
# operation against a real torch.distributed.TCPStore (libuv and classic
# servers); intranode-run takes torchrun's spellings; the binaries log
# through RUST_LOG.
#
# Run from the repo root: bash archive/perf/v12/torchrun.sh BUNDLE_DIR
# BUNDLE_DIR holds (gzipped or not) intranode-run, intranode-suite,
# 02_cuda_graph and torch_tcpstore (the test binary of
# crates/store/tests/torch_tcpstore.rs). Writes only under $OUT (and the
# unpacked binaries under /tmp). Every step is under `timeout`; the sum of
# the bounds is 460 s.
#
# What to look for:
# - "== protocol": "2 passed", and "every operation round-tripped" for the
#   libuv and the classic back-end (INTRANODE_REQUIRE_TORCH=1: no skip).
# - "== torchrun --standalone" and "== torchrun static": per rank a line
#   "joining the rendezvous store ... protocol=torch because=TORCHELASTIC_RUN_ID"
#   and "02_cuda_graph rank R/2: eager cross-stream all-reduce exact; ...
#   exact, no failed wait", then "exit 0".
# - "== suite check under torchrun": the check's verdict lines, "exit 0".
# - "== intranode-run, torchrun spellings": protocol=intranode, both ranks
#   exact, "exit 0".
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# A rank without its GPU fails instead of skipping.
export INTRANODE_BARRIER_TIMEOUT_MS=3000 INTRANODE_STORE_TIMEOUT_MS=60000 INTRANODE_REQUIRE_GPUS=1
SRC=${1:?usage: torchrun.sh BUNDLE_DIR}
OUT=${OUT:?OUT must name the output folder}
exec > >(tee "$OUT/torchrun.log") 2>&1

B=/tmp/intranode-launch-bundle
rm -rf "$B" && mkdir -p "$B"
for f in "$SRC"/*; do
    name=$(basename "$f")
    case "$name" in
        *.sh | *.md) ;;
        *.gz) gunzip -c "$f" > "$B/${name%.gz}" && chmod +x "$B/${name%.gz}" ;;
        *) cp "$f" "$B/$name" && chmod +x "$B/$name" ;;
    esac
done
ls -l "$B"

nvidia-smi -L
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$gpus" -ge 2 ]; then
    SHARE=(env)
    RUN_GPUS=()
else
    # One GPU: both ranks on it (correctness only).
    SHARE=(env INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 INTRANODE_DEVICE=0)
    RUN_GPUS=(--gpus 0,0)
fi
TORCHRUN=(python3 -m torch.distributed.run)

echo "== python and torch"
timeout 30 python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())'

echo "== protocol: TorchStore against a real torch.distributed.TCPStore"
INTRANODE_REQUIRE_TORCH=1 timeout 60 "$B/torch_tcpstore" --nocapture --test-threads=1 2>&1 | tail -12

echo "== torchrun --standalone --nproc_per_node 2 --no-python 02_cuda_graph"
RUST_LOG=intranode_store=info,warn timeout 100 "${SHARE[@]}" "${TORCHRUN[@]}" --standalone \
    --nproc_per_node 2 --no-python "$B/02_cuda_graph" --replays 20 2>&1 | tail -30
echo "exit ${PIPESTATUS[0]}"

echo "== torchrun static rendezvous (--nnodes 1 --master_port 29533) 02_cuda_graph"
RUST_LOG=intranode_store=info,warn timeout 90 "${SHARE[@]}" "${TORCHRUN[@]}" --nnodes 1 \
    --master_addr 127.0.0.1 --master_port 29533 --nproc_per_node 2 --no-python \
    "$B/02_cuda_graph" --replays 20 2>&1 | tail -30
echo "exit ${PIPESTATUS[0]}"

echo "== suite check under torchrun (reduced counts)"
timeout 120 "${SHARE[@]}" "${TORCHRUN[@]}" --standalone --nproc_per_node 2 --no-python \
    "$B/intranode-suite" check --stress-calls 50 --graph-replays 3 --free-replays 0 2>&1 \
    | grep -v "done, last" | tail -20
echo "exit ${PIPESTATUS[0]}"

echo "== intranode-run, torchrun spellings (program without --)"
if [ "$gpus" -ge 2 ]; then NPROC=gpu; else NPROC=2; fi
RUST_LOG=intranode_store=info,warn timeout 60 "${SHARE[@]}" "$B/intranode-run" \
    --nproc_per_node "$NPROC" "${RUN_GPUS[@]}" --standalone --timeout 55 \
    "$B/02_cuda_graph" --replays 10 2>&1 | tail -12
echo "exit ${PIPESTATUS[0]}"
