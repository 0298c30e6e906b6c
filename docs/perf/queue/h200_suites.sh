#!/bin/bash
# For a machine of 4 H200 (2 H200 ran it: all passed, the link probe gave
# ~360 GB/s): the suites that have not run on 4 H200 (the fault suite; on
# 4 H200 only `recreate` has run, no leak) and the probes with H100 figures
# only (the link probe: at most 365 GB/s from one H100). In order:
# `intranode-bench link` (every rank to every peer at once), `hop` (one
# NVLink hop, the launch floor, 0.66-0.74 us and 0.58-0.63 us on 4 H200,
# and the store floor), `phases` (the Lamport forms' phases on the GPU's
# clock), the suite's `recreate`, `check --only-barriers` and
# `faults-suite`. Uses every GPU (2 or 4).
# Usage (lib.sh, bundle: intranode-run, intranode-bench, intranode-suite):
#   OUT=DIR bash docs/perf/queue/h200_suites.sh
# Writes summary.txt and logs.tgz; about 6 minutes at 4 GPUs.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
queue_start intranode-run intranode-bench intranode-suite
export INTRANODE_REQUIRE_GPUS=$N
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
ranks 60 $N -- $D/intranode-bench link --reps 80 >$L/link_w$N.log 2>&1
echo "== link, world $N rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] \[[0-9]\] +(ce|sm)" $L/link_w$N.log | sort -k3,3 -k4,4n -s | cut -c5-
ranks 40 $N -- $D/intranode-bench hop >$L/hop_w$N.log 2>&1
echo "== hop, world $N rc=$? ($SECONDS s)"
grep -E "0<->|hop:" $L/hop_w$N.log
ranks 40 $N -- $D/intranode-bench phases --bytes 1024,65536,1048576,4194304 >$L/phases_w$N.log 2>&1
echo "== phases, world $N rc=$? ($SECONDS s)"
grep -E "phases" $L/phases_w$N.log | cut -c1-250
ranks 100 $N -- $D/intranode-suite recreate --cycles 10 --pieces 3 --stream-cycles 5 \
    --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$L/recreate_w$N.log 2>&1
echo "== recreate, world $N rc=$? ($SECONDS s)"
grep -E "^\[0\] recreate|PASS|FAIL" $L/recreate_w$N.log | grep -v "stream cycle" | cut -c1-230 | head -10
ranks 45 $N -- $D/intranode-suite check --only-barriers >$L/check_barriers_w$N.log 2>&1
echo "== check --only-barriers, world $N rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] check|FAIL|rror" $L/check_barriers_w$N.log | cut -c1-200 | head -4
timeout $((520 - SECONDS)) $D/intranode-suite faults-suite --nproc $N >$L/faults_w$N.log 2>&1
echo "== faults-suite --nproc $N rc=$? ($SECONDS s)"
grep -E "^faults-suite: (PASS|FAIL)" $L/faults_w$N.log | cut -c1-160
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
queue_logs
