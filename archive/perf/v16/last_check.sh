#!/bin/bash
# v16 last call (2 GPUs): 965a7ae (the reduce-scatter's one-vector loop
# written out again after sm_80 spilled): the suite's scatter/gather check
# at world G and with 2G ranks on the G GPUs.
# Usage, from the repo root:  OUT=DIR bash archive/perf/v16/last_check.sh BUNDLE
set -u
: "${OUT:?set OUT}"
B=${1:?bundle folder}
export NCCL_NVLS_ENABLE=0
D=/tmp/v16h
mkdir -p $D
for f in $B/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
G=$(nvidia-smi -L | grep -c '^GPU ')
R="$D/intranode-run --failure-wait-secs 5 --timeout"
INTRANODE_REQUIRE_GPUS=$G timeout 60 $R 55 --nproc-per-node $G -- $D/intranode-suite check --only-scatter-gather \
    >$OUT/check_sg.log 2>&1
echo "rc=$?"; grep -E "^\[0\] check|FAIL|rror|wrong" $OUT/check_sg.log | cut -c1-200 | head -3
GG=$(for i in $(seq 0 $((G - 1))); do printf "%s,%s," $i $i; done); GG=${GG%,}
INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=60000 timeout 90 $R 85 --nproc-per-node $((2 * G)) \
    --gpus $GG -- $D/intranode-suite check --only-scatter-gather >$OUT/check_sg_2g.log 2>&1
echo "rc=$?"; grep -E "^\[0\] check|FAIL|rror|wrong" $OUT/check_sg_2g.log | cut -c1-200 | head -3
echo "== done ($SECONDS s)"
