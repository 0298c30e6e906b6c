#!/bin/bash
# v16: the fault suite after the first-report fix (only a rank's first
# failed wait writes the error word), every case; on 2 H200 the late
# one-shot at 16 MiB had failed with "the next call failed differently".
# Usage, from the repo root:  OUT=DIR bash archive/perf/v16/faults_run.sh BUNDLE
set -u
: "${OUT:?set OUT}"
B=${1:?bundle folder}
export NCCL_NVLS_ENABLE=0
D=/tmp/v16f
mkdir -p $D
for f in $B/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
G=$(nvidia-smi -L | grep -c '^GPU ')
echo "== faults-suite --nproc $G"
INTRANODE_REQUIRE_GPUS=$G timeout 420 $D/intranode-suite faults-suite --nproc $G >$OUT/faults_w$G.log 2>&1
echo "rc=$?"
grep -E "^faults-suite: (PASS|FAIL)|cases" $OUT/faults_w$G.log | cut -c1-200
echo "== done ($SECONDS s)"
