#!/bin/bash
# Queued (issue 34, item 2; written for v14). Its second part, bench
# --tune at worlds 3 and 4, ran in v15 (docs/perf/v15/push-tune-h100x4/)
# and was removed. On a 4-GPU machine:
#   the Lamport launch shapes at world 4 (INTRANODE_LAMPORT_LAUNCH, the
#   same shape for the one-shot and the two-shot), 64 KiB-16 MiB, NCCL
#   and the default shape in the first run: whether the rule of NOTE
#   [lamport launch shape] (tuned on H200) holds on 4 ranks.
# Usage, from the repo root with the bundle (`cargo xtask device-bundle`)
# in bundle/:  OUT=DIR [BASE=bundle] bash docs/perf/queue/lamport_shapes_w4.sh
# Writes shapes_w4.txt under $OUT; prints a compact table last (about 4 minutes).
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
echo "== summary: shape bytes algo mean_us (x_nccl in the default rows)"
sort -k3,3 -k2,2n -k4,4n $OUT/shapes_w4.txt | awk '{printf "%-8s %9s %-17s %8s %s\n", $1, $2, $3, $4, $5}'
echo "== done"
