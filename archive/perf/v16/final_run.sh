#!/bin/bash
# v16 closing call (2 GPUs; 4 if lent): build d0e7633 (bundle) against
# 349c590 (intranode-bench-old: one vector a thread per round in the
# reduce-scatter's reduce).
#   1. reduce-scatter, push form, 16 MiB-1 GiB, old / new / old / new,
#      NCCL once: prediction, the pair of vectors per round takes the
#      push reduce-scatter at 2 ranks from 289 toward ~330 GB/s at 1 GiB;
#   2. check --only-scatter-gather (world G, and 2G ranks on the G GPUs);
#   3. check --only-stress --algos push (Plan::new moved the push
#      all-reduce's set-up: its PTX differs in register names and the
#      order of two independent instructions);
#   4. faults-suite --only late.
# Usage, from the repo root:  OUT=DIR bash archive/perf/v16/final_run.sh BUNDLE
set -u
: "${OUT:?set OUT}"
B=${1:?bundle folder}
export NCCL_NVLS_ENABLE=0
D=/tmp/v16e
mkdir -p $D
for f in $B/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
G=$(nvidia-smi -L | grep -c '^GPU ')
R="$D/intranode-run --failure-wait-secs 5 --timeout"
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
for turn in 1 2; do
    for b in old new; do
        bin=$D/intranode-bench; [ $b = old ] && bin=$D/intranode-bench-old
        algos=push; [ $turn = 1 ] && [ $b = old ] && algos=push,nccl
        echo "== 1. reduce-scatter world $G, $b, turn $turn"
        timeout 100 $R 90 --nproc-per-node $G -- $bin bench --collective reduce-scatter --ks 16 --graph-only \
            --no-decode --no-skew --algos $algos --min-bytes 16777216 --max-bytes 1073741824 --large-calls 200 \
            --out /tmp/rs_$b >$OUT/rs_${b}_$turn.log 2>&1
        echo "rc=$?"; rows $OUT/rs_${b}_$turn.log
    done
done
echo "== 2. check --only-scatter-gather, world $G and $((2 * G)) on $G GPUs"
INTRANODE_REQUIRE_GPUS=$G timeout 60 $R 55 --nproc-per-node $G -- $D/intranode-suite check --only-scatter-gather \
    >$OUT/check_sg.log 2>&1
echo "rc=$?"; grep -E "^\[0\] check|FAIL|rror|wrong" $OUT/check_sg.log | cut -c1-200 | head -3
GG=$(for i in $(seq 0 $((G - 1))); do printf "%s,%s," $i $i; done); GG=${GG%,}
INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=60000 timeout 90 $R 85 --nproc-per-node $((2 * G)) \
    --gpus $GG -- $D/intranode-suite check --only-scatter-gather >$OUT/check_sg_2g.log 2>&1
echo "rc=$?"; grep -E "^\[0\] check|FAIL|rror|wrong" $OUT/check_sg_2g.log | cut -c1-200 | head -3
echo "== 3. check --only-stress --algos push"
INTRANODE_REQUIRE_GPUS=$G timeout 90 $R 85 --nproc-per-node $G -- $D/intranode-suite check --only-stress --algos push \
    --stress-calls 300 >$OUT/check_push.log 2>&1
echo "rc=$?"; grep -v "done, last" $OUT/check_push.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-220 | head -3
echo "== 4. faults-suite --only late"
INTRANODE_REQUIRE_GPUS=$G timeout 120 $D/intranode-suite faults-suite --nproc $G --only late >$OUT/faults_late.log 2>&1
echo "rc=$?"; grep -E "^faults-suite: (PASS|FAIL)|cases" $OUT/faults_late.log | cut -c1-160
echo "== done ($SECONDS s)"
