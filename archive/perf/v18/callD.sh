#!/bin/bash
# v18 call D (4 GPUs, the last device minutes):
#   1. `check --only-graph` (new flag) at world 4: the 1000 CUDA-graph
#      replays of 10 all-reduces, not run since v17's layout change (call
#      C's full check ran out of its 230 s after the sweep);
#   2. the one fault case call C's time cut: skip, victim 0, push, 1 GiB;
#   3. `check --only-free` and `--only-symmetric` with push doubled;
#   4. item 1: is the chunk's length (power of two or not) what made call
#      C's shapes non-monotonic (3 slots: 14 KiB 4709 us, 21 KiB 4888, 32
#      KiB 4610, 64 KiB 4786 at 1 GiB)? The doubled default with 8 KiB
#      chunks (its own ~10.9 KiB: 4747), and 3 slots of 16 KiB.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cd && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
R="$D/intranode-run --failure-wait-secs 5 --nproc-per-node 4"
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
{
echo "== 1. check --only-graph, world 4"
INTRANODE_REQUIRE_GPUS=4 timeout 125 $R --timeout 120 -- $D/intranode-suite check --only-graph >$L/check_graph.log 2>&1
echo "rc=$? ($SECONDS s)"; grep -v "done, last" $L/check_graph.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
echo "== 2. faults-suite, the case call C did not reach"
INTRANODE_REQUIRE_GPUS=4 timeout 40 $D/intranode-suite faults-suite --nproc 4 \
    --only "skip, victim 0 --algo push --elems 536870912" >$L/faults_last.log 2>&1
echo "rc=$? ($SECONDS s)"; grep -E "^faults-suite: (PASS|FAIL)" $L/faults_last.log | cut -c1-200
for stage in free symmetric; do
    [ $SECONDS -gt 200 ] && { echo "== $stage skipped at $SECONDS s"; continue; }
    INTRANODE_REQUIRE_GPUS=4 timeout 50 $R --timeout 45 -- $D/intranode-suite check --only-$stage >$L/check_$stage.log 2>&1
    echo "== 3. check --only-$stage rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_$stage.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
done
for shape in "chunk=8192" "slots=3,lookahead=1,chunk=16384,scratch=79691776"; do
    [ $SECONDS -gt 260 ] && { echo "== '$shape' skipped at $SECONDS s"; continue; }
    INTRANODE_PUSH_LAUNCH=$shape timeout 45 $R --timeout 40 -- $D/intranode-bench bench --ks 16 --graph-only \
        --no-decode --no-skew --large-calls 100 --algos push --min-bytes 67108864 --max-bytes 1073741824 \
        --out /tmp/cd-out >$L/ar_$shape.log 2>&1
    echo "== 4. '$shape' rc=$? ($SECONDS s)"; rows $L/ar_$shape.log
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callD.tgz -C $D logs
