#!/bin/bash
# Queued (issue 34, items 2 and 5; written for v14, not run: the session's
# device time went to docs/perf/v14/perf_run.sh). On a 4-GPU machine:
#   1. the Lamport launch shapes at world 4 (INTRANODE_LAMPORT_LAUNCH, the
#      same shape for the one-shot and the two-shot), 64 KiB-16 MiB,
#      NCCL and the default shape in the first run: whether the rule of
#      NOTE [lamport launch shape] (tuned on H200) holds on 4 ranks;
#   2. bench --tune at world 3 (GPUs 0-2) and world 4, to 256 MiB, every
#      form (push forced too): the crossovers per world size for
#      host/src/algo.rs (world 3 was never measured).
# Usage, from the repo root with the bundle (`cargo xtask device-bundle`)
# in bundle/:  OUT=DIR [BASE=bundle] bash docs/perf/queue/lamport_shapes_tune_w34.sh
# Writes 7 files under $OUT; prints a compact table last (about 5 minutes).
set -u
: "${OUT:?set OUT}"
BASE=${BASE:-bundle}
export NCCL_NVLS_ENABLE=0
unpack() {
    mkdir -p "$2"
    for f in "$1"/*.gz; do
        n=$(basename "$f" .gz)
        gzip -dc "$f" >"$2/$n" && chmod +x "$2/$n"
    done
}
B=/tmp/v14-base
unpack "$BASE" $B
nvidia-smi -L
run() { # world, timeout, args...
    local w=$1 t=$2
    shift 2
    timeout $((t + 10)) $B/intranode-run --nproc-per-node $w --failure-wait-secs 10 --timeout $t -- $B/intranode-bench "$@"
}
# The table rows of a bench log: bytes algo mean_us x_nccl.
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
common="bench --ks 16 --graph-only --no-decode --no-skew --calls 3000 --large-calls 500"
: >$OUT/shapes_w4.txt
for shape in default 132x64 132x128 132x256 264x128 264x256 528x64 528x128 66x512; do
    if [ $shape = default ]; then
        env=""
        algos=lamport,lamport-two-shot,nccl
    else
        env="lamport=$shape,lamport-two-shot=$shape"
        algos=lamport,lamport-two-shot
    fi
    echo "== shape $shape"
    INTRANODE_LAMPORT_LAUNCH=$env run 4 50 $common --algos $algos --min-bytes 65536 \
        --max-bytes 16777216 --out /tmp/shape-$shape >/tmp/shape-$shape.log 2>&1
    echo "rc=$?"
    rows /tmp/shape-$shape.log | sed "s/^/$shape /" >>$OUT/shapes_w4.txt
done
echo "== tune, world 3 (GPUs 0-2)"
CUDA_VISIBLE_DEVICES=0,1,2 INTRANODE_REQUIRE_GPUS=3 run 3 110 $common --max-bytes 268435456 --large-calls 300 \
    --tune $OUT/crossovers_w3.json --out /tmp/tune-w3 >$OUT/tune_w3.log 2>&1
echo "rc=$?"
echo "== tune, world 4"
run 4 120 $common --max-bytes 268435456 --large-calls 300 \
    --tune $OUT/crossovers_w4.json --out /tmp/tune-w4 >$OUT/tune_w4.log 2>&1
echo "rc=$?"
cp /tmp/tune-w3/*.csv $OUT/tune_w3.csv 2>/dev/null
cp /tmp/tune-w4/*.csv $OUT/tune_w4.csv 2>/dev/null
echo "== summary: shape bytes algo mean_us (x_nccl in the default rows)"
sort -k3,3 -k2,2n -k4,4n $OUT/shapes_w4.txt | awk '{printf "%-8s %9s %-17s %8s %s\n", $1, $2, $3, $4, $5}'
echo "== tune w3 (bytes algo mean_us x_nccl)"
rows $OUT/tune_w3.log | awk '$1 >= 65536' | head -80
echo "== crossovers"
cat $OUT/crossovers_w3.json $OUT/crossovers_w4.json 2>/dev/null | tr -d ' \n'; echo
echo "== done"
