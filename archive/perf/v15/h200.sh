#!/bin/bash
# v15: the leak and fault suites on 2 GPUs, asked as nvidia-h200-x2 (the call
# got 2 H100: archive/perf/v15/w2-h100x2/), for issue 36's fix and NOTE [no
# arrival after giving up], from the final tree
# (bundle-v18s/):
#   1. recreate at world 2: the pieces, then whole communicators and new
#      streams per cycle, memory / fds / threads flat;
#   2. faults-suite --nproc 2, the late cases (every late victim fails or
#      returns the exact sum and then fails).
# Usage, from the repo root on 2 GPUs:  OUT=DIR bash archive/perf/v15/h200.sh
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=2
D=/tmp/v18
mkdir -p $D
for f in bundle-v18s/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
echo "== 1. recreate, world 2"
timeout 110 $D/intranode-run --nproc-per-node 2 --timeout 100 -- $D/intranode-suite recreate --cycles 20 \
    --pieces 5 --stream-cycles 5 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$OUT/recreate_w2.log 2>&1
echo "rc=$?"
grep -E "^\[0\] recreate|PASS|FAIL|MiB" $OUT/recreate_w2.log | cut -c1-220 | head -12
echo "== 2. faults-suite, late cases"
timeout 90 $D/intranode-suite faults-suite --nproc 2 --only "late" >$OUT/faults_late_w2.log 2>&1
echo "rc=$?"
grep -E "^faults-suite: (PASS|FAIL)|cases" $OUT/faults_late_w2.log | cut -c1-160
grep -E "victim.*(late call|next one)|FAIL" $OUT/faults_late_w2.log | grep -v "^faults-suite" | cut -c1-260 | head -8
echo "== done ($SECONDS s)"
