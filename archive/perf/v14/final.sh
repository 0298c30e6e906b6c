#!/bin/bash
# v14 final device call (the session's last ~7 device minutes), on 4 GPUs
# (H200 where lent: issue 36 asks for both cards), from the repo root with
# intranode-run.gz and intranode-suite.gz of this tree in bundle-final/:
#   1. recreate at world 4: pieces, 10 whole cycles, 10 new-stream cycles
#      with calls of every size class, judged at 2 MiB / 0 fds / 0 threads;
#   2. world 8 on 4 GPUs (two ranks per GPU): the back-to-back stage alone,
#      launch overlap on, then off (the first 4-H100 run hung there);
#   3. world 4: the back-to-back stage (every form, then push alone) and the
#      scatter/gather checks of the
#      merged kernels (push in one pass, scatter/gather past a slot);
#   4. faults-suite: the 16 MiB cases (a peer that dies, one that skips).
# Usage: OUT=DIR bash archive/perf/v14/final.sh   (about 4 minutes at most)
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4
N=/tmp/v14-final
mkdir -p $N
for f in bundle-final/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$N/$n" && chmod +x "$N/$n" || exit 1
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
R="$N/intranode-run --failure-wait-secs 5"
echo "== 1. recreate, world 4"
timeout 55 $R --nproc-per-node 4 --timeout 50 -- $N/intranode-suite recreate --cycles 10 --pieces 3 \
    --stream-cycles 10 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$OUT/recreate_w4.log 2>&1
echo "rc=$?"
grep -E "^\[0\].*(alone|cycles of|new fds|PASS)|rror" $OUT/recreate_w4.log | cut -c1-260 | head -10
for pdl in 1 0; do
    echo "== 2. world 8 on 4 GPUs, back to back, launch overlap $pdl"
    INTRANODE_LAUNCH_OVERLAP=$pdl INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=5000 \
        timeout 42 $R --nproc-per-node 8 --gpus 0,0,1,1,2,2,3,3 --timeout 38 -- \
        $N/intranode-suite check --only-stress --stress-calls 300 >$OUT/eight_stress_pdl$pdl.log 2>&1
    echo "rc=$?"
    grep -v "done, last" $OUT/eight_stress_pdl$pdl.log | grep -E "^\[0\] check|never came|rror|FAIL" | cut -c1-220 | head -4
done
echo "== 3. world 4, back to back and scatter/gather"
INTRANODE_BARRIER_TIMEOUT_MS=5000 timeout 30 $R --nproc-per-node 4 --timeout 26 -- \
    $N/intranode-suite check --only-stress --stress-calls 600 >$OUT/stress_w4.log 2>&1
echo "rc=$?"
grep -v "done, last" $OUT/stress_w4.log | grep -E "^\[0\] check|rror|FAIL|wrong" | cut -c1-220 | head -3
INTRANODE_BARRIER_TIMEOUT_MS=5000 timeout 30 $R --nproc-per-node 4 --timeout 25 -- \
    $N/intranode-suite check --only-stress --algos push --stress-calls 200 >$OUT/stress_push_w4.log 2>&1
echo "rc=$?"
grep -v "done, last" $OUT/stress_push_w4.log | grep -E "^\[0\] check|rror|FAIL|wrong" | cut -c1-220 | head -3
timeout 30 $R --nproc-per-node 4 --timeout 25 -- $N/intranode-suite check --only-scatter-gather >$OUT/sg_w4.log 2>&1
echo "rc=$?"
grep -E "^\[0\] check|rror|FAIL" $OUT/sg_w4.log | cut -c1-200 | head -3
echo "== 4. faults-suite, the 16 MiB cases"
timeout 40 $N/intranode-suite faults-suite --nproc 4 --only "16 MiB" >$OUT/faults_16mib_w4.log 2>&1
echo "rc=$?"
grep -E "^faults-suite: (PASS|FAIL)|cases failed" $OUT/faults_16mib_w4.log | cut -c1-200
echo "== done ($SECONDS s)"
