#!/bin/bash
# v21 call B (2 H200; no 4-H200 machine was lent): the leak and fault
# suites on H200 (docs/perf/queue/h200_suites.sh, queued since v19: not
# run on an H200 since v14), the link probe on H200, and auto / NCCL at
# world 2 from 1 KiB to 1 GiB against ../shared/results/2026-11-25/h200x2
# (nothing at 2 GPUs slower). Every bench result is checked.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cb && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
N=$(nvidia-smi -L | grep -c '^GPU ')
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $5, $6, $7, $8}'; }
bench() { # name, algos, args...
    local name=$1 algos=$2
    shift 2
    timeout 100 $D/intranode-run --failure-wait-secs 5 --timeout 95 --nproc-per-node $N -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out $D/out-$name "$@" >$L/$name.log 2>&1
    echo "== $name (world $N, $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror|auto within|auto is" $L/$name.log | head -3
    rows $L/$name.log
}
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
bench ar_w$N auto,nccl --min-bytes 1024 --max-bytes 1073741824
export INTRANODE_REQUIRE_GPUS=$N
timeout 60 $D/intranode-run --failure-wait-secs 5 --timeout 55 --nproc-per-node $N -- \
    $D/intranode-bench link --reps 80 >$L/link_w$N.log 2>&1
echo "== link, world $N rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] \[[0-9]\] +(ce|sm)" $L/link_w$N.log | sort -k3,3 -k4,4n -s | cut -c5-
timeout 100 $D/intranode-run --nproc-per-node $N --timeout 95 -- $D/intranode-suite recreate --cycles 10 \
    --pieces 3 --stream-cycles 5 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$L/recreate_w$N.log 2>&1
echo "== recreate, world $N rc=$? ($SECONDS s)"
grep -E "^\[0\] recreate|PASS|FAIL" $L/recreate_w$N.log | grep -v "stream cycle" | cut -c1-230 | head -10
timeout 45 $D/intranode-run --timeout 40 --nproc-per-node $N -- $D/intranode-suite check --only-barriers \
    >$L/check_barriers_w$N.log 2>&1
echo "== check --only-barriers, world $N rc=$? ($SECONDS s)"
grep -E "^\[[0-9]\] check|FAIL|rror" $L/check_barriers_w$N.log | cut -c1-200 | head -4
timeout $((540 - SECONDS)) $D/intranode-suite faults-suite --nproc $N >$L/faults_w$N.log 2>&1
echo "== faults-suite --nproc $N rc=$? ($SECONDS s)"
grep -E "^faults-suite: (PASS|FAIL)" $L/faults_w$N.log | cut -c1-160
echo "== done ($SECONDS s)"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/cb.tgz -C $D logs
