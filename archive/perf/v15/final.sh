#!/bin/bash
# v15 last call on 4 GPUs:
#   1. the Lamport two-shot, 256 KiB-4 MiB at world 4, three builds in two
#      turns: main before v15 (bundle-pt/), c175005 (bundle-new/: the gather
#      skip re-tested every slot word, +0.1 us), 36924c0 (bundle-v17s/: the
#      wait's own outcome). Prediction: 36924c0 within 0.5 % of bundle-pt.
#   2. auto at world 3 (GPUs 0-2), 1 KiB-256 MiB, NCCL beside: the v15
#      crossovers (Lamport one-shot to 512 KiB, push from 16 MiB) put auto
#      at the fastest form measured by the v15 tune at every size.
#   3. the push form at world 4 under four more shapes whose rings fit
#      (fewer blocks with larger chunks, 3 slots with lookahead 1 at 64
#      KiB), 64 MiB-1 GiB, NCCL beside the last. Prediction: none ahead of
#      NCCL at 1 GiB (the v15 shapes left 2-4 %, not the per-tile cost).
#   4. candle-tp at TP4 with longer windows (40 windows of 30 steps):
#      whether the fused back-end's gain clears the window-to-window
#      spread at batch 1 and 32 as it did at batch 8.
# Usage, from the repo root:  OUT=DIR bash archive/perf/v15/final.sh
# Writes lamport2_ab.txt, auto_w3.txt, push_w4.txt, candle/; ~7 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
unpack() {
    mkdir -p "$2"
    for f in "$1"/*.gz; do
        n=$(basename "$f" .gz)
        gzip -dc "$f" >"$2/$n" && chmod +x "$2/$n" || exit 1
    done
}
unpack bundle-pt /tmp/f-pt
unpack bundle-new /tmp/f-new
unpack bundle-v17s /tmp/f-v17
nvidia-smi -L
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
bench() { # dir, world, timeout, args...
    local d=$1 w=$2 t=$3
    shift 3
    timeout $((t + 10)) $d/intranode-run --nproc-per-node $w --timeout $t -- $d/intranode-bench bench \
        --ks 16 --graph-only --no-decode --no-skew "$@"
}
echo "== 1. Lamport two-shot, three builds, two turns"
: >$OUT/lamport2_ab.txt
for turn in 1 2; do
    for v in pt new v17; do
        bench /tmp/f-$v 4 40 --calls 3000 --algos lamport-two-shot --min-bytes 262144 \
            --max-bytes 4194304 --out /tmp/l2-$v-$turn >/tmp/l2-$v-$turn.log 2>&1
        echo "$v$turn rc=$?"
        rows /tmp/l2-$v-$turn.log | sed "s/^/$v$turn /" >>$OUT/lamport2_ab.txt
    done
done
awk '{k=$2; v[k]=v[k]" "$1"="$4} END{for(k in v) print k, v[k]}' $OUT/lamport2_ab.txt | sort -n
echo "== 2. auto at world 3"
CUDA_VISIBLE_DEVICES=0,1,2 INTRANODE_REQUIRE_GPUS=3 bench /tmp/f-v17 3 80 --calls 2000 --large-calls 300 \
    --algos auto,nccl --min-bytes 1024 --max-bytes 268435456 --out /tmp/auto3 >/tmp/auto3.log 2>&1
echo "rc=$?"
grep -E "FAIL|mismatch|rror" /tmp/auto3.log | head -2
rows /tmp/auto3.log | tee $OUT/auto_w3.txt | awk '$2=="auto"'
echo "== 3. push at world 4"
MIB=1048576
: >$OUT/push_w4.txt
n=0
for shape in "blocks=66,chunk=262144,scratch=$((200 * MIB))" "chunk=65536,slots=3,lookahead=1,scratch=$((152 * MIB))" \
    "blocks=96,chunk=131072,slots=3,lookahead=1,scratch=$((220 * MIB))" \
    "chunk=131072,slots=3,lookahead=1,scratch=$((300 * MIB))"; do
    n=$((n + 1))
    algos=push
    [ $n = 4 ] && algos=push,nccl
    INTRANODE_PUSH_LAUNCH=$shape bench /tmp/f-v17 4 50 --large-calls 300 --algos $algos \
        --min-bytes 67108864 --max-bytes 1073741824 --out /tmp/push-$n >/tmp/push-$n.log 2>&1
    echo "$shape rc=$?"
    grep -E "FAIL|mismatch|rror" /tmp/push-$n.log | head -2
    rows /tmp/push-$n.log | sed "s/^/$shape /" | tee -a $OUT/push_w4.txt
done
echo "== 4. candle-tp TP4, 40 windows of 30 steps"
mkdir -p $OUT/candle
OUT=$OUT/candle timeout 200 examples/candle-tp/device-run.sh bundle-candle 4 --windows 40 --steps 30 \
    --per-window >$OUT/candle/run.log 2>&1
echo "rc=$?"
for f in $OUT/candle/w4_b*.txt; do
    echo "-- $(basename $f .txt)"
    grep -E "^\[0\] (intranode|nccl|none)" $f | cut -c1-200
done
echo "== done ($SECONDS s)"
