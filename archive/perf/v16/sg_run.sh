#!/bin/bash
# v16 first call (4 GPUs): the push form of the reduce-scatter and
# all-gather (NOTE [push reduce-scatter and all-gather]).
#   1. check --only-scatter-gather at world 4: every type and op, shards
#      1 .. 1 Mi+3 elements, as the communicator decides, forced onto ours,
#      onto the Lamport form and onto the push form;
#   2. RS and AG at world 4, 4 MiB-1 GiB (the whole buffer), Lamport form,
#      push form and NCCL in one run, default push shape;
#   3. the same with the rings that fit at 4 ranks (v15: chunk=64K,
#      slots=3, lookahead=1, scratch=152 MiB);
#   4. RS and AG at world 2 (GPUs 0,1), default shape, to 256 MiB.
# Prediction: push AG at 64 MiB ~150-165 us (Lamport 196.6, NCCL 190.5:
# v14), RS ~155-170 (Lamport 187.9, NCCL 192.2); push ahead of NCCL from
# 16 MiB, and of the Lamport form from 64 MiB at least.
# Usage, from the repo root:  OUT=DIR bash archive/perf/v16/sg_run.sh BUNDLE
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
gpus=$(nvidia-smi -L | grep -c '^GPU ')
echo "gpus=$gpus"; nvidia-smi -L | head -1
R="$D/intranode-run --nproc-per-node $gpus --timeout"
echo "== 1. check --only-scatter-gather (world $gpus)"
INTRANODE_REQUIRE_GPUS=$gpus timeout 150 $R 140 -- $D/intranode-suite check --only-scatter-gather >$OUT/check_sg.log 2>&1
echo "rc=$?"
grep -E "^\[0\] check|FAIL|rror|wrong|mismatch" $OUT/check_sg.log | cut -c1-250 | head -5
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $5, $6, $7}'; }
for c in reduce-scatter all-gather; do
    echo "== 2. $c world $gpus, default shape"
    timeout 150 $R 140 -- $D/intranode-bench bench --collective $c --ks 16 --graph-only --no-decode --no-skew \
        --algos lamport,push,nccl --min-bytes 4194304 --max-bytes 1073741824 --large-calls 200 \
        --out /tmp/sg_$c >$OUT/${c}_w${gpus}.log 2>&1
    echo "rc=$?"; rows $OUT/${c}_w${gpus}.log
done
for c in reduce-scatter all-gather; do
    echo "== 3. $c world $gpus, rings that fit"
    INTRANODE_PUSH_LAUNCH="chunk=65536,slots=3,lookahead=1,scratch=159383552" \
    timeout 150 $R 140 -- $D/intranode-bench bench --collective $c --ks 16 --graph-only --no-decode --no-skew \
        --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824 --large-calls 200 \
        --out /tmp/sgf_$c >$OUT/${c}_w${gpus}_fit.log 2>&1
    echo "rc=$?"; rows $OUT/${c}_w${gpus}_fit.log
done
for c in reduce-scatter all-gather; do
    echo "== 4. $c world 2 (GPUs 0,1)"
    CUDA_VISIBLE_DEVICES=0,1 timeout 100 $D/intranode-run --nproc-per-node 2 --timeout 90 -- \
        $D/intranode-bench bench --collective $c --ks 16 --graph-only --no-decode --no-skew \
        --algos lamport,push,nccl --min-bytes 16777216 --max-bytes 268435456 --large-calls 200 \
        --out /tmp/sg2_$c >$OUT/${c}_w2.log 2>&1
    echo "rc=$?"; rows $OUT/${c}_w2.log
done
echo "== done ($SECONDS s)"
