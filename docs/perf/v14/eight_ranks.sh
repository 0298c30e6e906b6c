#!/bin/bash
# v14 (issue 34, item 7): every form of ours at world 8 on 4 GPUs, two
# ranks per GPU (rank r on GPU r/2; `GPUS=0,1,2,3,0,1,2,3` for the other
# layout), checked exactly: `intranode-suite check --require-forms` fails
# unless the intra-node path is up and the sweep, back-to-back calls,
# graph, free-running stress and symmetric-buffer checks ran every
# all-reduce form (lamport, lamport-two-shot, one-shot, two-shot, push,
# hcm) and auto, reduce-scatter and all-gather were forced onto ours and
# the fused all-reduce + residual + RMSNorm kernel ran. Every output is
# checked against the f64 reference (one rounding to the output type) and
# bitwise across the 8 ranks. NCCL refuses two ranks on one GPU, so it is
# absent (auto picks among ours; the types our kernels lack are refused
# with NcclUnavailable, as the suite expects). Time-sliced GPUs: for
# correctness only, no timing. Reduced counts, under 5 minutes.
# Usage, from the repo root with the bundle (`cargo xtask device-bundle`)
# in bundle/, on a machine with 4 or more GPUs:
#   OUT=DIR docs/perf/v14/eight_ranks.sh
# Writes $OUT/check_w8_on4.log.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1
# Two ranks share each GPU's time slices: a peer's kernel can wait a few
# slices for its partner, far below this; the suite's last check (a
# barrier one rank skips on purpose) waits it out once.
export INTRANODE_BARRIER_TIMEOUT_MS=5000
GPUS=${GPUS:-0,0,1,1,2,2,3,3}
# The bundle's gzipped binaries (a whole `device-bundle` or only the
# ones used here), unpacked.
D=/tmp/v14-eight
mkdir -p "$D"
for f in bundle/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
echo "== intranode-suite check --require-forms, world 8 on GPUs $GPUS"
timeout 280 "$D/intranode-run" --nproc-per-node 8 --gpus "$GPUS" --failure-wait-secs 10 --timeout 270 -- \
    "$D/intranode-suite" check --require-forms --stress-calls 100 --graph-replays 5 --free-replays 1 \
    >"$OUT/check_w8_on4.log" 2>&1
echo "rc=$?"
grep -v "done, last" "$OUT/check_w8_on4.log" | grep -E "^\[0\]|FAIL|rror|wrong|panick" | tail -14
echo "== done"
