#!/bin/bash
# v16 verification call (any 2+ GPUs; H200 when lent): the GPU tests and
# examples with cudarc's defaults, the full check, the fault suite and
# the leak check (recreate), from the tree at the bundle's commit.
# PART=a: 1-2 (about 6 min on 2 GPUs), PART=b: 3-4.
# Usage, from the repo root:  OUT=DIR PART=a|b bash archive/perf/v16/verify_run.sh BUNDLE
set -u
: "${OUT:?set OUT}"
B=${1:?bundle folder}
export NCCL_NVLS_ENABLE=0
D=/tmp/v16t
mkdir -p $D
for f in $B/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
cp $B/run-gpu-tests.sh $D/
nvidia-smi -L
G=$(nvidia-smi -L | grep -c '^GPU ')
R="$D/intranode-run --nproc-per-node $G --failure-wait-secs 5 --timeout"
PART=${PART:-a}
if [ "$PART" = a ]; then
echo "== 1. GPU tests and examples"
INTRANODE_REQUIRE_GPUS=$G timeout 200 bash $D/run-gpu-tests.sh >$OUT/gputests.log 2>&1
echo "rc=$?"; grep -E "^== " $OUT/gputests.log
echo "== 2. check (every form, world $G)"
INTRANODE_REQUIRE_GPUS=$G timeout 230 $R 220 -- $D/intranode-suite check >$OUT/check_w$G.log 2>&1
echo "rc=$?"; grep -v "done, last" $OUT/check_w$G.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-250 | head -5
fi
if [ "$PART" = b ]; then
echo "== 3. recreate (leaks)"
timeout 60 $R 55 -- $D/intranode-suite recreate --cycles 10 --pieces 3 --stream-cycles 5 \
    --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$OUT/recreate_w$G.log 2>&1
echo "rc=$?"; grep -E "^\[0\].*(alone|cycles of|new fds|PASS)|rror" $OUT/recreate_w$G.log | cut -c1-260 | head -6
echo "== 4. faults-suite"
timeout 150 $D/intranode-suite faults-suite --nproc $G >$OUT/faults_w$G.log 2>&1
echo "rc=$?"; grep -E "^faults-suite: (PASS|FAIL)|cases" $OUT/faults_w$G.log | cut -c1-160
fi
echo "== done ($SECONDS s)"
