#!/usr/bin/env bash
# Runs candle-tp from a bundle (`cargo xtask candle-example --out DIR`) on a
# GPU machine, every run's output also in $OUT (default: the current
# directory). Usage: device-run.sh BUNDLE_DIR [GPUS [CANDLE_TP_ARGS...]]
# (the arguments after GPUS go to every run on 2 or more GPUs, e.g.
# --windows 60 --per-window).
#
# With 2 or more GPUs: every back-end (intranode, its fused all-reduce +
# residual + RMSNorm, NCCL) on every GPU, batch 1, 8 and 32.
# With one GPU: a world of one (every back-end; intranode's communicator
# has no intra-node path in a world of one and sends the sum to NCCL),
# then two ranks sharing the GPU on intranode's path alone (NCCL refuses
# two ranks on one GPU): a correctness run, its timing time-sliced and
# meaningless.
set -u
bundle=$(cd "${1:?usage: device-run.sh BUNDLE_DIR [GPUS]}" && pwd)
gpus=${2:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
extra=("${@:3}")
out=${OUT:-.}
export NCCL_NVLS_ENABLE=0
# cuBLAS, cuRAND and NCCL are opened at run time (cudarc's dynamic
# loading): the system's, else those of the machine's Python wheels or
# any other copy found below /usr and /opt.
libs=$bundle/lib
for d in $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
    for sub in cu13/lib cublas/lib curand/lib nccl/lib; do
        [ -d "$d/$sub" ] && libs=$libs:$d/$sub
    done
done
for f in $(timeout 30 find /usr /opt \( -name 'libcublas.so.13' -o -name 'libcurand.so.10' \
    -o -name 'libnccl.so.2' \) 2>/dev/null); do
    case ":$libs:" in *":$(dirname "$f"):"*) ;; *) libs=$libs:$(dirname "$f") ;; esac
done
# cudarc asks for libnccl.so (or .so.N for N other than 2): a link to
# libnccl.so.2 where only that one exists.
links=$(mktemp -d)
if ! ldconfig -p | grep -q 'libnccl\.so '; then
    for d in ${libs//:/ } /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64; do
        [ -e "$d/libnccl.so.2" ] && { ln -sf "$d/libnccl.so.2" "$links/libnccl.so"; break; }
    done
fi
export LD_LIBRARY_PATH=$libs:$links${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldconfig -p | grep -E 'libcublas|libcurand|libnccl|libcudart' | head
nvidia-smi -L
fail=0
run() {
    local name=$1
    shift
    echo "== $name: $*"
    "$@" 2>&1 | tee "$out/$name.txt"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== $name failed ($rc)"; fail=1; }
}
tp=$bundle/candle-tp
# A carried bundle holds it gzipped (58 MB raw, mostly candle's kernels).
if [ ! -x "$tp" ] && [ -f "$tp.gz" ]; then
    tp=$(mktemp -d)/candle-tp
    gzip -dc "$bundle/candle-tp.gz" >"$tp" && chmod +x "$tp"
fi
launch=$bundle/intranode-run
if [ "$gpus" -ge 2 ]; then
    for b in 1 8 32; do
        run "w${gpus}_b$b" "$launch" --nproc-per-node "$gpus" --timeout 600 -- "$tp" --backend all --batch "$b" "${extra[@]}"
    done
else
    for b in 1 8 32; do
        run "w1_b$b" "$launch" --nproc-per-node 1 --timeout 70 -- "$tp" --backend all --batch "$b"
    done
    for be in intranode fused; do
        run "w2_shared_gpu_$be" env INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 \
            "$launch" --nproc-per-node 2 --gpus 0,0 --timeout 70 -- \
            "$tp" --backend "$be" --batch 8 --windows 2 --steps 5
    done
fi
exit $fail
