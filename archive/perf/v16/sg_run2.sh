#!/bin/bash
# v16 second call (4 GPUs, or 2: then world 2 and 4 ranks on 2 GPUs): the shard forms with one ring each (chunks
# twice as long in the same scratch: 42 KiB at 4 ranks by default).
#   1. check --only-scatter-gather at world 4 (now with the back-to-back
#      stage: push all-reduce and both forms mixed, no host step), and at
#      world 8 on the 4 GPUs (two ranks a GPU);
#   2. RS and AG at world 4, 16 MiB-1 GiB: Lamport, push (default
#      shape), NCCL; then push with a 64 MiB scratch (64 KiB chunks,
#      2 slots) and with 3 slots, lookahead 1 (default scratch);
#   3. world 3 (GPUs 0-2) and world 2 (GPUs 0,1), default shape.
# Prediction: at 4 ranks the default shape now within 2 % of call 1's
# fitted rings (RS 0.91-0.97x NCCL, AG 0.94x from 64 MiB).
# Usage, from the repo root:  OUT=DIR bash archive/perf/v16/sg_run2.sh BUNDLE
set -u
: "${OUT:?set OUT}"
B=${1:?bundle folder}
export NCCL_NVLS_ENABLE=0
D=/tmp/v16
mkdir -p $D
for f in $B/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L | head -1
G=$(nvidia-smi -L | grep -c '^GPU ')
R="$D/intranode-run --failure-wait-secs 5 --timeout"
echo "== 1. check --only-scatter-gather, world $G"
INTRANODE_REQUIRE_GPUS=$G timeout 100 $R 90 --nproc-per-node $G -- $D/intranode-suite check --only-scatter-gather >$OUT/check_sg_w$G.log 2>&1
echo "rc=$?"
grep -E "^\[0\] check|FAIL|rror|wrong|mismatch" $OUT/check_sg_w$G.log | cut -c1-250 | head -5
W2=$((2 * G)); GG=$(for i in $(seq 0 $((G - 1))); do printf "%s,%s," $i $i; done); GG=${GG%,}
echo "== 1. check --only-scatter-gather, world $W2 on $G GPUs ($GG)"
INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=60000 timeout 130 $R 120 --nproc-per-node $W2 --gpus $GG -- \
    $D/intranode-suite check --only-scatter-gather >$OUT/check_sg_w$W2.log 2>&1
echo "rc=$?"
grep -v "done, last" $OUT/check_sg_w$W2.log | grep -E "^\[[0-7]\] check|FAIL|rror|wrong|mismatch" | cut -c1-250 | head -9
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $5, $6, $7}'; }
sg() { # name world extra-env algos min max
    local name=$1 w=$2 env=$3 algos=$4 min=$5 max=$6 vis
    vis=$(seq -s, 0 $((w - 1)))
    echo "== $name"
    env CUDA_VISIBLE_DEVICES=$vis $env timeout 120 $R 110 --nproc-per-node $w -- $D/intranode-bench bench --collective $c \
        --ks 16 --graph-only --no-decode --no-skew --algos $algos --min-bytes $min --max-bytes $max --large-calls 200 \
        --out /tmp/$name >$OUT/$name.log 2>&1
    echo "rc=$?"; rows $OUT/$name.log
}
for c in reduce-scatter all-gather; do
    sg ${c}_w$G $G X=1 lamport,push,nccl 16777216 1073741824
    sg ${c}_w${G}_s64 $G INTRANODE_PUSH_LAUNCH=scratch=67108864 push 67108864 1073741824
    sg ${c}_w${G}_3slots $G INTRANODE_PUSH_LAUNCH=slots=3,lookahead=1 push 67108864 1073741824
    if [ $G -ge 4 ]; then
        sg ${c}_w3 3 X=1 lamport,push,nccl 16777216 268435456
        sg ${c}_w2 2 X=1 lamport,push,nccl 16777216 268435456
    fi
done
echo "== done ($SECONDS s)"
