#!/bin/bash
# v14 (issue 34, item 6): candle-tp at TP4 and TP2 in one device call,
# the back-ends interleaved within each run: after the correctness checks
# (every back-end against rank 0's single-GPU reference, bitwise across
# ranks, against each other), 60 windows of 10 decode steps per back-end
# (intranode, intranode-fused, nccl, none), the order rotating from window
# to window; per back-end the median tokens/s and each window's ratio to
# NCCL in the same window: median, p10-p90, min-max, windows won, and a
# verdict (gain when p10 > 1). Batch 1, 8 and 32; TP4 on GPUs 0-3, then
# TP2 on GPUs 0,1 of the same machine.
# Usage, from the repo root on a machine with 4 GPUs, with the bundle of
# `cargo xtask candle-example --out DIR` (candle-tp may be gzipped) in
# bundle-candle/ (or give its path):
#   OUT=DIR archive/perf/v14/candle_run.sh [BUNDLE_DIR]
# Writes $OUT/w4_b{1,8,32}.txt, $OUT/w2_b{1,8,32}.txt (each run's output,
# every window's tokens/s included) and $OUT/run.log. Under 9 minutes.
set -u
: "${OUT:?set OUT}"
B=${1:-bundle-candle}
export NCCL_NVLS_ENABLE=0
args=(--windows 60 --steps 10 --per-window)
echo "== TP4"
timeout 270 examples/candle-tp/device-run.sh "$B" 4 "${args[@]}" >"$OUT/run.log" 2>&1
echo "rc=$?"
echo "== TP2 (GPUs 0,1)"
CUDA_VISIBLE_DEVICES=0,1 timeout 220 examples/candle-tp/device-run.sh "$B" 2 "${args[@]}" >>"$OUT/run.log" 2>&1
echo "rc=$?"
for f in "$OUT"/w{4,2}_b{1,8,32}.txt; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f" .txt)"
    grep -E "^\[0\] ([0-9]+ windows of|candle-tp:|back-end|intranode|nccl|none)" "$f" | head -12
    grep -E "FAILED|rror|panick" "$f" | head -4
done
echo "== done"
