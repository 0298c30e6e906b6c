#!/bin/bash
# Queued (issue 34, item 3; written in v17 with no device time left). On a
# 4-GPU machine, from the repo root with the bundle (`cargo xtask
# device-bundle`, or intranode-run.gz and intranode-bench.gz) in bundle/:
#   OUT=DIR bash docs/perf/queue/decode_overlap_w4.sh
# The decode stack at TP4 (8 Llama layers in one graph, us per layer over
# no communication) with launch overlap on (the default) and off
# (`INTRANODE_LAUNCH_OVERLAP=0`), two turns each, NCCL in the first:
# what programmatic dependent launch is worth at TP4, never measured
# there (v11 measured it on 2 H200). The fused all-reduce + residual +
# RMSNorm misses its target at batch 1-8 for llama3-8b by 3.5-4.5 us a
# layer (v15); at TP2 it is at or below zero.
# Prediction: overlap on saves 1-2 us a layer at batch 1-8 (one launch
# latency a collective, two collectives a layer); if it saves nothing,
# the TP4 overhead is the wait for the slowest rank, not the launch.
# Writes summary.txt and decode_{on,off}_{1,2}.md; about 6 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/decode-overlap && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
{
for turn in 1 2; do
    for overlap in 1 0; do
        name=$([ $overlap = 1 ] && echo on || echo off)_$turn
        variants=none,ours,fused
        [ $turn = 1 ] && [ $overlap = 1 ] && variants=none,nccl,ours,fused
        INTRANODE_LAUNCH_OVERLAP=$overlap timeout 100 $D/intranode-run --nproc-per-node 4 --timeout 90 -- \
            $D/intranode-bench decode --batches 1,8,64 --variants $variants --out /tmp/decode-$name \
            >/tmp/decode-$name.log 2>&1
        echo "== overlap $overlap, turn $turn: rc=$? ($SECONDS s)"
        cp /tmp/decode-$name/decode_w4.md $OUT/decode_$name.md 2>/dev/null
        grep -E "^\[0\] \|" /tmp/decode-$name.log | head -20
    done
done
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
