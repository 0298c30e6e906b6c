#!/bin/bash
# Queued for the first machine with 8 GPUs (issue 34, item 7): never run
# at 8 GPUs so far. Three parts, one rank per GPU, NCCL in the same call:
#   1. the all-reduce sweep at world 8, 1 KiB-1 GiB, every form of ours,
#      auto and NCCL, graph of 16 calls replayed free-running (as
#      ../shared/results/2026-11-27/h100x4/bench_w4_graph16_1GiB at 4);
#   2. the decode stack at TP8 (8 Llama layers in one graph; none, NCCL,
#      ours, fused, fused-prefetch (v22); llama3-8b and -70b, batch 1-64);
#   3. the GPU suite's check at world 8 with --require-forms (every form
#      of ours checked exactly, reduced counts);
#   0. first, `intranode-bench link` (v19): what NVLink carries with every
#      rank writing to (copy engines, SM stores) or reading from every
#      peer at once, the ceiling of the large-message forms, and
#      `intranode-bench hop` (v21): one NVLink hop from rank 0 to each
#      peer and the launch floor of a graph of empty kernels, the fixed
#      costs of the Lamport forms, with v23's store floor, and v23's
#      `intranode-bench phases`, the Lamport forms' phases on each GPU's
#      clock (all appended to topo.txt).
# Usage, from the repo root with the bundle (`cargo xtask device-bundle`)
# in bundle/, on an 8-GPU machine:  OUT=DIR docs/perf/queue/eight_gpus.sh
# Writes 8 files into $OUT (no folders): topo.txt, bench_w8.{log,json,csv,png},
# decode_w8.{log,json}, check_w8.log. Every step has its own timeout;
# all of it within 9 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=8
# The bundle's gzipped binaries (a whole `device-bundle` or only the
# ones used here), unpacked.
D=/tmp/eight-gpus
mkdir -p "$D"
for f in bundle/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
T=$(mktemp -d)
{ nvidia-smi -L; nvidia-smi topo -m; } >"$OUT/topo.txt" 2>&1
head -8 "$OUT/topo.txt"
R="$D/intranode-run --nproc-per-node 8 --failure-wait-secs 10 --timeout"

echo "== 0. link ceiling at world 8"
timeout 25 $R 20 -- "$D/intranode-bench" link --reps 20 >>"$OUT/topo.txt" 2>&1
echo "rc=$?"
grep -E "^\[[0-9]\] \[[0-9]\] +(ce|sm)" "$OUT/topo.txt" | sort -k3,3 -k4,4n -s | cut -c5- | head -72
timeout 40 $R 35 -- "$D/intranode-bench" hop >>"$OUT/topo.txt" 2>&1
echo "hop rc=$?"
grep -E "0<->|hop:" "$OUT/topo.txt" | head -24
timeout 40 $R 35 -- "$D/intranode-bench" phases --bytes 1024,65536,1048576 >>"$OUT/topo.txt" 2>&1
echo "phases rc=$?"
grep -E "phases" "$OUT/topo.txt" | grep -E "phases:|rank 0:" | head -8

echo "== 1. sweep at world 8, graph of 16 free-running, 1 KiB-1 GiB, NCCL beside"
timeout 245 $R 240 -- "$D/intranode-bench" bench --max-bytes 1073741824 --no-decode --no-skew \
    --ks 16 --graph-only --large-calls 500 --out "$T/bench" >"$OUT/bench_w8.log" 2>&1
echo "rc=$?"
for f in json csv png; do cp "$T/bench/bench_w8.$f" "$OUT/" 2>/dev/null; done
grep -E "^\[0\]\s*(1024|65536|262144|1048576|4194304|16777216|67108864|268435456|1073741824) .*(auto|nccl|push) " \
    "$OUT/bench_w8.log" | head -40

echo "== 2. decode stack at TP8"
timeout 115 $R 110 -- "$D/intranode-bench" decode --variants none,nccl,ours,fused,fused-prefetch --out "$T/decode" >"$OUT/decode_w8.log" 2>&1
echo "rc=$?"
cp "$T/decode/decode_w8.json" "$OUT/" 2>/dev/null
grep -E "^\[0\] \|" "$OUT/decode_w8.log" | head -40

echo "== 3. intranode-suite check --require-forms at world 8"
INTRANODE_BARRIER_TIMEOUT_MS=5000 timeout 140 $R 135 -- "$D/intranode-suite" check --require-forms \
    --stress-calls 300 --graph-replays 5 --free-replays 1 >"$OUT/check_w8.log" 2>&1
echo "rc=$?"
grep -v "done, last" "$OUT/check_w8.log" | grep -E "^\[0\]|FAIL|rror|wrong|panick" | tail -14
echo "== done"
