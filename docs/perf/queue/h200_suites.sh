#!/bin/bash
# Queued (issue 34; written in v19) for a machine of 4 H200 (2 H200 ran
# it in v21 call B, docs/perf/v21/NOTES.md: all passed; the link probe
# gave ~360 GB/s there). The fault suite has not run on 4 H200 (v22 call
# G ran `recreate` there: no leak). `intranode-bench hop`: one NVLink hop
# and the launch floor (v22: 0.66-0.74 us and 0.58-0.63 us on 4 H200,
# docs/perf/v22/NOTES.md), with v23's store floor, and v23's
# `intranode-bench phases` (never run yet: docs/perf/v23/NOTES.md). The
# link probe,
# new in v19, has only H100 figures (docs/perf/v19/NOTES.md: 365 GB/s at
# most from one GPU). From the repo root with intranode-run.gz,
# intranode-bench.gz and intranode-suite.gz (`cargo xtask device-bundle`)
# in bundle/:
#   OUT=DIR bash docs/perf/queue/h200_suites.sh
# Uses every GPU (2 or 4). Writes summary.txt and logs.tgz; about 6
# minutes at 4 GPUs.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/h200-suites && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
N=$(nvidia-smi -L | grep -c '^GPU ')
export INTRANODE_REQUIRE_GPUS=$N
L=$D/logs
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
timeout 60 $D/intranode-run --failure-wait-secs 5 --timeout 55 --nproc-per-node $N -- \
    $D/intranode-bench link --reps 80 >$L/link_w$N.log 2>&1
echo "== link, world $N rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] \[[0-9]\] +(ce|sm)" $L/link_w$N.log | sort -k3,3 -k4,4n -s | cut -c5-
timeout 40 $D/intranode-run --failure-wait-secs 5 --timeout 35 --nproc-per-node $N -- \
    $D/intranode-bench hop >$L/hop_w$N.log 2>&1
echo "== hop, world $N rc=$? ($SECONDS s)"
grep -E "0<->|hop:" $L/hop_w$N.log
timeout 40 $D/intranode-run --failure-wait-secs 5 --timeout 35 --nproc-per-node $N -- \
    $D/intranode-bench phases --bytes 1024,65536,1048576,4194304 >$L/phases_w$N.log 2>&1
echo "== phases, world $N rc=$? ($SECONDS s)"
grep -E "phases" $L/phases_w$N.log | cut -c1-250
timeout 100 $D/intranode-run --nproc-per-node $N --timeout 95 -- $D/intranode-suite recreate --cycles 10 \
    --pieces 3 --stream-cycles 5 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$L/recreate_w$N.log 2>&1
echo "== recreate, world $N rc=$? ($SECONDS s)"
grep -E "^\[0\] recreate|PASS|FAIL" $L/recreate_w$N.log | grep -v "stream cycle" | cut -c1-230 | head -10
timeout 45 $D/intranode-run --timeout 40 --nproc-per-node $N -- $D/intranode-suite check --only-barriers \
    >$L/check_barriers_w$N.log 2>&1
echo "== check --only-barriers, world $N rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] check|FAIL|rror" $L/check_barriers_w$N.log | cut -c1-200 | head -4
timeout $((520 - SECONDS)) $D/intranode-suite faults-suite --nproc $N >$L/faults_w$N.log 2>&1
echo "== faults-suite --nproc $N rc=$? ($SECONDS s)"
grep -E "^faults-suite: (PASS|FAIL)" $L/faults_w$N.log | cut -c1-160
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $D logs
