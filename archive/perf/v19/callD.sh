#!/bin/bash
# v19 call D (2 GPUs, asked as nvidia-h200-x2): the leak and fault suites,
# which have not run on an H200 since v14, on the tree with v19's
# defaults:
#   1. recreate at world 2: the pieces, then whole communicators and new
#      streams per cycle; memory, fds and threads must stay flat;
#   2. check --only-barriers at world 2;
#   3. faults-suite --nproc 2, every case that fits the time.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=2
D=/tmp/cd && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
timeout 100 $D/intranode-run --nproc-per-node 2 --timeout 95 -- $D/intranode-suite recreate --cycles 20 \
    --pieces 5 --stream-cycles 5 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$L/recreate_w2.log 2>&1
echo "== 1. recreate, world 2 rc=$? ($SECONDS s)"
grep -E "^\[0\] recreate|PASS|FAIL" $L/recreate_w2.log | grep -v "stream cycle" | cut -c1-230 | head -10
timeout 45 $D/intranode-run --timeout 40 --nproc-per-node 2 -- $D/intranode-suite check --only-barriers >$L/check_barriers_w2.log 2>&1
echo "== 2. check --only-barriers, world 2 rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] check|FAIL|rror" $L/check_barriers_w2.log | cut -c1-200 | head -3
timeout $((500 - SECONDS)) $D/intranode-suite faults-suite --nproc 2 >$L/faults_w2.log 2>&1
echo "== 3. faults-suite --nproc 2 rc=$? ($SECONDS s)"
grep -E "^faults-suite: (PASS|FAIL)" $L/faults_w2.log | cut -c1-160
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callD.tgz -C $D logs
