#!/bin/bash
# Queued (issue 34, items 1 and 4; written in v15, whose device time ran
# out). On a 4-GPU machine, from the repo root with the bundle
# (`cargo xtask device-bundle`, or intranode-run.gz and intranode-bench.gz)
# in bundle/:  OUT=DIR bash docs/perf/queue/push_rings_w3_w4.sh
#   1. the push form at world 3 (GPUs 0-2), 16 MiB-1 GiB, under the
#      default shape (its rings cut each chunk to 32 KiB at 3 ranks) and
#      with rings that fit 64 KiB chunks, NCCL beside: v15 found half of
#      the 4-rank gap in cut chunks (docs/perf/v15/NOTES.md), and auto
#      runs the push form at 3 ranks from 16 MiB;
#   2. the push form at world 4 with fewer threads per block (256, 384)
#      at v15's best shape: whether 512 threads of stores per SM oversubscribe
#      the NVLink queues (the one launch-shape axis v15 left untried);
#   3. reduce-scatter and all-gather at world 4, 16-64 MiB, ours / NCCL
#      (item 4: v14 measured 0.98x and 1.03x NCCL at 64 MiB).
# Writes push_w3.txt, push_w4.txt, sg_w4.txt; about 6 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/push-rings
mkdir -p $D
for f in bundle/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
bench() { # world, timeout, args...
    local w=$1 t=$2
    shift 2
    timeout $((t + 10)) $D/intranode-run --nproc-per-node $w --timeout $t -- $D/intranode-bench bench \
        --ks 16 --graph-only --no-decode --no-skew --large-calls 300 "$@"
}
MIB=1048576
: >$OUT/push_w3.txt
for shape in "" "scratch=$((68 * MIB))" "chunk=65536,slots=3,lookahead=1,scratch=$((100 * MIB))"; do
    algos=push
    [ -z "$shape" ] && algos=push,nccl
    echo "== 1. world 3, shape '${shape:-default}'"
    CUDA_VISIBLE_DEVICES=0,1,2 INTRANODE_PUSH_LAUNCH=$shape bench 3 70 --algos $algos \
        --min-bytes 16777216 --max-bytes 1073741824 --out /tmp/p3 >/tmp/p3.log 2>&1
    echo "rc=$?"
    grep -E "FAIL|mismatch|rror" /tmp/p3.log | head -2
    rows /tmp/p3.log | sed "s/^/${shape:-default} /" | tee -a $OUT/push_w3.txt
done
: >$OUT/push_w4.txt
for threads in 256 384 512; do
    shape="threads=$threads,chunk=65536,slots=3,lookahead=1,scratch=$((152 * MIB))"
    algos=push
    [ $threads = 512 ] && algos=push,nccl
    echo "== 2. world 4, $shape"
    INTRANODE_PUSH_LAUNCH=$shape bench 4 60 --algos $algos --min-bytes 67108864 \
        --max-bytes 1073741824 --out /tmp/p4 >/tmp/p4.log 2>&1
    echo "rc=$?"
    grep -E "FAIL|mismatch|rror" /tmp/p4.log | head -2
    rows /tmp/p4.log | sed "s/^/$shape /" | tee -a $OUT/push_w4.txt
done
: >$OUT/sg_w4.txt
for coll in reduce-scatter all-gather; do
    echo "== 3. world 4 $coll"
    bench 4 60 --collective $coll --algos ours,nccl --min-bytes 16777216 --max-bytes 67108864 \
        --out /tmp/sg >/tmp/sg.log 2>&1
    echo "rc=$?"
    rows /tmp/sg.log | sed "s/^/$coll /" | tee -a $OUT/sg_w4.txt
done
echo "== done ($SECONDS s)"
