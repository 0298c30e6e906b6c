#!/bin/bash
# Issue 29 item 1 and 6 on GPUs (branch parity): every cudarc NcclType
# through every Communicator collective on 2 ranks, results checked
# exactly (`intranode-suite check --only-types`), and the benchmark's
# --dtype / --op with nccl-tests' columns.
#
# Run from the repository root on a GPU machine, with the bundle's folder
# (gzipped binaries: intranode-run, intranode-suite, intranode-bench) as
# $1. Writes only under $OUT. Two GPUs: the full run (under 8 minutes: 165 s for the check, which takes the driver's
# first compile of the PTX on a fresh machine, and 45 s per bench).
# One GPU: two ranks sharing it (NCCL refuses that: the NCCL-only types
# must be refused with NcclUnavailable, the floats run on our kernels).
#
# What to look for:
# - "check rank 0/2 ok (element types only): N calls, every type through
#   every collective" on both ranks (one GPU: "NCCL unavailable (...):
#   bf16/f16/f32 on ours only; the other types refused ..."), exit 0;
# - each bench: the table "as nccl-tests prints it" with #wrong 0 on every
#   row, type/redop as asked, only nccl and auto rows for i32, f64 and
#   prod; the bf16 sum rows' auto/NCCL ratios as in
#   archive/perf/v12/2026-11-25 (0.40-0.46 up to 1 MiB, 0.5 at 4 MiB, 0.73
#   at 16 MiB, on graphs of 16 here).
set -u
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
: "${OUT:?OUT must name the output folder}"
SRC=${1:?usage: archive/perf/v12/parity.sh BUNDLE_DIR}
B=/tmp/parity-bin
mkdir -p "$B" "$OUT"
for f in "$SRC"/*.gz; do
    n=$(basename "$f" .gz)
    gunzip -c "$f" > "$B/$n" && chmod +x "$B/$n"
done
nvidia-smi -L
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
RUN="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10"
BENCH="bench --no-decode --no-skew --graph-only --ks 16 --large-calls 100"

if [ "$GPUS" -ge 2 ]; then
    echo "== check --only-types, 2 ranks on 2 GPUs"
    INTRANODE_REQUIRE_GPUS=2 timeout 170 $RUN --timeout 165 -- \
        "$B/intranode-suite" check --only-types 2>&1 | tail -4
    echo "rc=${PIPESTATUS[0]}"
    for case in "i32 sum" "f64 avg" "u8 max" "f32 min" "bf16 prod" "bf16 sum"; do
        set -- $case
        echo "== bench --dtype $1 --op $2"
        timeout 45 $RUN --timeout 42 -- "$B/intranode-bench" $BENCH \
            --calls 400 --max-bytes 16777216 \
            --dtype "$1" --op "$2" --out "$OUT/bench_$1_$2" 2>&1 \
            | sed -n '/as nccl-tests prints it/,/auto against/p;/wrong/p;/error/p' | head -60
        echo "rc=${PIPESTATUS[0]}"
    done
else
    echo "== check --only-types, 2 ranks sharing GPU 0 (no NCCL)"
    INTRANODE_REQUIRE_GPUS=1 INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 \
        timeout 200 $RUN --gpus 0,0 --timeout 190 -- \
        "$B/intranode-suite" check --only-types 2>&1 | tail -4
    echo "rc=${PIPESTATUS[0]}"
    echo "== bench --dtype f16 --op max, 2 ranks sharing GPU 0 (ours; time slices, correctness only)"
    INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1 \
        timeout 120 $RUN --gpus 0,0 --timeout 115 -- "$B/intranode-bench" $BENCH \
        --calls 64 --max-bytes 1048576 --algos lamport,auto \
        --dtype f16 --op max --out "$OUT/bench_f16_max" 2>&1 \
        | sed -n '/as nccl-tests prints it/,/auto against/p;/wrong/p;/error/p' | head -40
    echo "rc=${PIPESTATUS[0]}"
fi
