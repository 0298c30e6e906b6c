#!/bin/bash
# Issue 28, phase 1: the push form (NOTE [push all-reduce] in
# kernels-gpu/src/push.rs) on 2 GPUs.
#   (i)  correctness: `intranode-suite check --algos push`, reduced counts
#        (bf16/f16/f32, every op, in place and out of place, lengths that
#        are no multiple of a chunk, one and several buffers, back-to-back
#        calls, graphs), with the default shape and with a tiny ring
#        (small chunks, 3 slots, a 256 KiB buffer: thousands of tiles per
#        call, every slot reused many times);
#   (ii) the peers beside the default shape (NCCL, two-shot, Lamport
#        two-shot), 16 MiB - 1 GiB, then a launch-shape sweep of the push
#        form, 16 - 256 MiB; graph replay, free-running, bus bandwidth.
# Usage, from the repo root on a 2-GPU machine: archive/perf/v12/push.sh DIR
# where DIR holds intranode-run, intranode-suite, intranode-bench (plain or
# .gz). Writes only under $OUT. About 7 minutes; starts no sweep step
# after 7 minutes (each step is bounded: 8 minutes at most in all).
set -u
BUNDLE=${1:?usage: archive/perf/v12/push.sh BUNDLE_DIR}
: "${OUT:?OUT must name the output folder}"
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
# The first process of a fresh machine JIT-compiles the 19 MB PTX (~50 s);
# later ones find it in this cache.
export CUDA_CACHE_PATH=/tmp/cuda-cache CUDA_CACHE_MAXSIZE=4294967296
B=/tmp/push-bin
mkdir -p "$B" "$OUT"
for f in "$BUNDLE"/*; do
  case "$f" in
    *.gz) gunzip -c "$f" > "$B/$(basename "$f" .gz)" ;;
    *.sh) ;;
    *) cp "$f" "$B/" ;;
  esac
done
chmod +x "$B"/*
START=$SECONDS
elapsed() { echo $((SECONDS - START)); }
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
nvidia-smi -L
nvidia-smi topo -m | head -4

echo "== (i.a) check --algos push, default shape ($(elapsed) s)"
timeout 200 $R 190 -- "$B/intranode-suite" check --algos push --stress-calls 300 \
  --graph-replays 5 --free-replays 1 > "$OUT/check_default.log" 2>&1
echo "rc=$?"; grep -v "done, last" "$OUT/check_default.log" | tail -8

echo "== (i.b) check --algos push, tiny ring: 256 KiB buffer, blocks=5,threads=64,chunk=2048,slots=3 ($(elapsed) s)"
INTRANODE_SYMM_MEM_BUFFER_BYTES=262144 INTRANODE_PUSH_LAUNCH=blocks=5,threads=64,chunk=2048,slots=3 \
  timeout 100 $R 95 -- "$B/intranode-suite" check --algos push --stress-calls 100 \
  --graph-replays 3 --free-replays 0 > "$OUT/check_tiny.log" 2>&1
echo "rc=$?"; grep -v "done, last" "$OUT/check_tiny.log" | tail -6

BENCH="bench --no-decode --no-skew --ks 16 --graph-only --min-bytes 16777216"
echo "== (ii.a) peers and the default shape (blocks=32,threads=512,chunk=65536,slots=4; 10 MiB buffer), 16 MiB - 1 GiB ($(elapsed) s)"
timeout 150 $R 145 -- "$B/intranode-bench" $BENCH --max-bytes 1073741824 \
  --algos push,two-shot,lamport-two-shot,nccl --out "$OUT/base" > "$OUT/base.log" 2>&1
echo "rc=$?"; grep -E "bytes +algo|^\[0\] +[0-9]+ |wrong|rror" "$OUT/base.log" | tail -20

# BUFFER_MIB SHAPE, most promising first. The chunk is cut to what the
# buffer holds: 2 x blocks x (world - 1) x slots slots (`push_launch`).
SHAPES="
10 blocks=16,chunk=65536,slots=4
10 blocks=24,chunk=65536,slots=4
10 blocks=64,chunk=65536,slots=4
10 blocks=32,chunk=65536,slots=2
10 blocks=16,chunk=131072,slots=2
64 blocks=32,chunk=131072,slots=4
64 blocks=32,chunk=262144,slots=4
64 blocks=16,chunk=262144,slots=4
64 blocks=16,chunk=524288,slots=4
64 blocks=64,chunk=131072,slots=4
64 blocks=32,chunk=131072,slots=8
64 blocks=24,chunk=262144,slots=4
64 blocks=48,chunk=131072,slots=4
10 blocks=32,threads=256,chunk=65536,slots=4
64 blocks=64,threads=256,chunk=65536,slots=8
64 blocks=32,chunk=65536,slots=8
"
echo "== (ii.b) shape sweep of the push form, 16 - 256 MiB, graph-16 bus bandwidth (GB/s)"
echo "sweep: buffer_mib shape | busbw 16M 64M 256M | mean_us 16M 64M 256M"
i=0
while read -r mib shape; do
  [ -z "$mib" ] && continue
  if [ "$(elapsed)" -gt 420 ]; then echo "sweep: out of time at $(elapsed) s, skipped $mib $shape"; continue; fi
  i=$((i + 1))
  log="$OUT/sweep_$i.log"
  INTRANODE_SYMM_MEM_BUFFER_BYTES=$((mib << 20)) INTRANODE_PUSH_LAUNCH=$shape \
    timeout 60 $R 55 -- "$B/intranode-bench" $BENCH --max-bytes 268435456 --large-calls 1000 \
    --algos push --out "$OUT/sweep_$i" > "$log" 2>&1
  rc=$?
  bw=$(awk '$3 == "push" {printf " %s", $NF}' "$log")
  us=$(awk '$3 == "push" {printf " %s", $(NF-2)}' "$log")
  echo "sweep: $mib $shape |$bw |$us rc=$rc $(grep -m1 -iE 'wrong|error' "$log")"
done <<< "$SHAPES"
echo "== done in $(elapsed) s"
