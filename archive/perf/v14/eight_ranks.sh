#!/bin/bash
# v14 (issue 34, item 7): our forms at world 8 on 4 GPUs, two ranks per
# GPU (rank r on GPU r/2; `GPUS=0,1,2,3,0,1,2,3` for the other layout),
# correctness only (time-sliced GPUs: no timing). NCCL refuses two ranks
# on one GPU, so it is absent.
#
# The first run (main at aaeea1c, 4 H100, RUN_RESULT/eight) passed the
# whole sweep (756 cases: every form, lamport, lamport-two-shot, one-shot,
# two-shot, push, hcm and auto, x 4 ops x 9 lengths x 3 types, each call
# checked against the f64 reference and bitwise across the 8 ranks, the
# host synchronized after each call), then hung in the back-to-back stage
# (mixed forms with no host step between calls): ranks 0,2,3,4 in a
# two-shot waiting at its first barrier for rank 1, ranks 1,5,6,7 already
# in the next call (push). That stage passes at world 4 on 4 GPUs (one
# rank per GPU, 10000 calls, ../shared/results/2026-11-27/h100x4/check_w4.log).
# So this run splits the suite into parts, each its own job:
#   1. the back-to-back stage alone, as it hung (launch overlap on);
#   2. the same with INTRANODE_LAUNCH_OVERLAP=0 (no programmatic
#      dependent launch): whether the overlap between a call and the next
#      on a GPU two processes time-slice is what breaks it;
#   3. the fused all-reduce + residual + RMSNorm (fails if the fused kernel
#      never ran), reduce-scatter and all-gather (forced onto ours and as
#      decided), the free-running stress (every form, one form at a time,
#      back to back with skew, checked exactly on the GPU), then the
#      symmetric-buffer checks while time is left.
# Usage, from the repo root with the bundle (`cargo xtask device-bundle`,
# or intranode-run.gz and intranode-suite.gz of this branch) in bundle/,
# on a machine with 4 or more GPUs:  OUT=DIR archive/perf/v14/eight_ranks.sh
# Writes $OUT/stress_pdl.log, stress_nopdl.log, norm.log, sg.log,
# free.log, symm.log. Under 5 minutes (STRESS_SECS, default 70, bounds
# each back-to-back part; TOTAL_SECS, default 285, the whole run).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1
# Two ranks share each GPU's time slices: in the back-to-back stage ranks
# drifted more than 5 s apart (v15, archive/perf/v15/NOTES.md); 60 s passed.
export INTRANODE_BARRIER_TIMEOUT_MS=60000
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
EXTRA=
part() {
    local name=$1 secs=$2
    shift 2
    echo "== $name: $EXTRA check $* (world 8 on GPUs $GPUS)"
    timeout $((secs + 5)) env $EXTRA "$D/intranode-run" --nproc-per-node 8 --gpus "$GPUS" --failure-wait-secs 5 \
        --timeout "$secs" -- "$D/intranode-suite" check "$@" >"$OUT/$name.log" 2>&1
    echo "rc=$?"
    grep -v "done, last" "$OUT/$name.log" | grep -E "^\[0\] check|FAIL|rror|wrong|panick|never came" | head -10
}
part stress_pdl ${STRESS_SECS:-70} --only-stress --stress-calls 300
EXTRA=INTRANODE_LAUNCH_OVERLAP=0
part stress_nopdl ${STRESS_SECS:-70} --only-stress --stress-calls 300
EXTRA=
part norm 60 --only-norm
part sg 40 --only-scatter-gather
part free 40 --only-free --free-replays 2
left=$((${TOTAL_SECS:-285} - SECONDS))
[ "$left" -gt 30 ] && part symm "$left" --only-symmetric
echo "== done ($SECONDS s)"
