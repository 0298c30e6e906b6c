#!/bin/bash
# v13 after the issue-27 merges (kernel family table, one launch path,
# device primitives, crates/ floors), on 2 GPUs, two parts:
#   PART=a: 02_cuda_graph with an empty driver cache, the reduced GPU
#           suite, then the default free-running sweep (compare with
#           ../shared/results/2026-11-25/h200x2/bench_w2.json).
#   PART=b: A/B of the launch path, the base build (04b694b, before the
#           merges, bundle-base/) and this one (bundle-final/) taking
#           turns: a free-running graph sweep and the lined-up eager
#           sweep with cudarc's defaults (host us per call).
#   PART=c: the suite's bad-input and the NCCL methods' test (the typed
#           argument errors), then candle-tp (bundle-candle/, 11 runs per
#           back-end).
# Usage, from the repo root: OUT=DIR PART=a|b|c archive/perf/v13/final.sh
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=2
unpack() {
    mkdir -p "$2"
    for f in "$1"/*.gz; do
        n=$(basename "$f" .gz)
        gzip -dc "$f" >"$2/$n" && chmod +x "$2/$n"
    done
}
N=/tmp/v13-new
unpack bundle-final $N
R="$N/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
nvidia-smi -L
case ${PART:-a} in
a)
    echo "== 02_cuda_graph, empty driver cache"
    CUDA_CACHE_PATH=$(mktemp -d) INTRANODE_TIMING=1 timeout 60 $R 55 -- $N/02_cuda_graph --replays 10 2>&1 |
        tee $OUT/cold_02.log | grep -E "set-up|exact|rror" | head -4
    echo "== check, reduced counts"
    INTRANODE_BARRIER_TIMEOUT_MS=5000 timeout 200 $R 190 -- $N/intranode-suite check --stress-calls 300 \
        --graph-replays 5 --free-replays 1 >$OUT/check.log 2>&1
    echo "rc=$?"
    grep -v "done, last" $OUT/check.log | grep -E "ok|rror|FAIL|wrong|panick" | tail -8
    echo "== default free-running sweep"
    timeout 280 $R 270 -- $N/intranode-bench bench --out $OUT >$OUT/bench.log 2>&1
    echo "rc=$?"
    grep -E "^\s*(1024|8192|65536|262144|1048576|4194304|16777216|67108864) .*(auto|nccl)" $OUT/bench.log | head -40
    ;;
b)
    O=/tmp/v13-base
    unpack bundle-base $O
    RO="$O/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
    ab="bench --ks 16 --no-decode --no-skew --calls 3000 --graph-only --algos lamport,lamport-two-shot,one-shot,two-shot,push,auto,nccl"
    eager="bench --aligned --cudarc-defaults --algos lamport,two-shot,nccl --max-bytes 1048576"
    for turn in 1 2; do
        echo "== turn $turn: graph sweep, base then new"
        timeout 90 $RO 85 -- $O/intranode-bench $ab --out /tmp/ab-base-$turn >$OUT/ab_base_$turn.log 2>&1; echo "rc=$?"
        timeout 90 $R 85 -- $N/intranode-bench $ab --out /tmp/ab-new-$turn >$OUT/ab_new_$turn.log 2>&1; echo "rc=$?"
    done
    echo "== eager, lined up, cudarc defaults: base then new"
    timeout 90 $RO 85 -- $O/intranode-bench $eager --out /tmp/eager-base >$OUT/eager_base.log 2>&1; echo "rc=$?"
    timeout 90 $R 85 -- $N/intranode-bench $eager --out /tmp/eager-new >$OUT/eager_new.log 2>&1; echo "rc=$?"
    ;;
c)
    echo "== bad-input (the typed argument errors) and the NCCL methods' test"
    # The mismatch cases need the call fingerprints (INTRANODE_DEBUG=detail).
    INTRANODE_DEBUG=detail timeout 70 $R 60 -- $N/intranode-suite bad-input >$OUT/bad_input.log 2>&1
    echo "rc=$?"
    grep -E "ok|rror|FAIL|expected|panick" $OUT/bad_input.log | tail -14
    INTRANODE_REQUIRE_GPUS=1 timeout 60 $N/test-gpu_nccl_methods --test-threads=1 >$OUT/gpu_nccl_methods.log 2>&1
    echo "rc=$?"
    tail -4 $OUT/gpu_nccl_methods.log
    # candle-tp on this build, 11 timed runs per back-end (part b's
    # candle step wrote into a folder it had not made: run alone).
    echo "== candle-tp"
    mkdir -p /tmp/candle-out
    OUT=/tmp/candle-out timeout 300 examples/candle-tp/device-run.sh bundle-candle 2 --reps 11 >$OUT/candle_run.log 2>&1
    echo "rc=$?"
    cat /tmp/candle-out/w2_b*.txt >$OUT/candle.txt 2>/dev/null
    grep -E "back-end|^\[0\] (intranode|nccl|none|check)" $OUT/candle.txt
    ;;
esac
echo "== done"
