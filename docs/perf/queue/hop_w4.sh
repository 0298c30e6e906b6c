#!/bin/bash
# Queued in v21 (issue 34, item 2) for a machine of 4 GPUs (H100 or H200):
# `intranode-bench hop` was written after v21's device time was spent and
# has never run. It measures the two fixed costs under the Lamport forms
# apart from any collective: one NVLink hop as a Lamport wait sees it
# (rank 0 with each peer) and the launch floor of a graph of 16 empty
# kernels. Beside it, the Lamport one-shot and two-shot at 1 KiB-4 MiB
# (graph of 16, free-running, every result checked, NCCL in the same
# run), to put each size's time against launch + hops + bytes.
# Prediction (docs/perf/v21/NOTES.md): ~1.0-1.5 us a hop and ~1.0-1.5 us
# of launch floor; the one-shot's 2.9 us at 1 KiB is then launch + one
# hop, the two-shot's ~5.3 us fixed cost launch + two hops + reduction.
# From the repo root with intranode-run.gz and intranode-bench.gz
# (`cargo xtask device-bundle`) in bundle/:
#   OUT=DIR bash docs/perf/queue/hop_w4.sh
# Writes summary.txt, hop_w4.log, hop_w2.log, lamport_w4.log; about 2
# minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/hop-w4 && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for w in 4 2; do
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_REQUIRE_GPUS=$w timeout 60 \
        $D/intranode-run --failure-wait-secs 5 --timeout 55 --nproc-per-node $w -- \
        $D/intranode-bench hop >$OUT/hop_w$w.log 2>&1
    echo "== hop, world $w rc=$? ($SECONDS s)"
    grep -E "0<->|hop:" $OUT/hop_w$w.log
done
CUDA_VISIBLE_DEVICES=0,1,2,3 timeout 120 $D/intranode-run --failure-wait-secs 5 --timeout 115 \
    --nproc-per-node 4 -- $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew \
    --algos lamport,lamport-two-shot,nccl --min-bytes 1024 --max-bytes 4194304 \
    --out $D/out >$OUT/lamport_w4.log 2>&1
echo "== lamport forms, world 4 rc=$? ($SECONDS s)"
grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $OUT/lamport_w4.log | awk '{print $2, $3, $4, $(NF-2), $(NF-1)}'
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
