#!/bin/bash
# v18 call C (4 H100 or H200), tree with the all-reduce's push form
# doubled by default at 4 ranks:
#   1. item 1: call B found `slots=3,lookahead=1` doubled with 32 KiB
#      chunks (152 MiB of scratch) at 4596 us at 1 GiB (1.2-1.7 % behind
#      NCCL) and ahead of it at 256 MiB (1176.0 against 1181-1183), where
#      more scratch at 2 slots gained nothing. Around it: the same again,
#      3 slots on 64 / 96 / 304 MiB (14 / 21 / 64 KiB chunks), 4 slots
#      with lookahead 1 and 2 on 200 MiB (32 KiB). Prediction: the third
#      slot is what helps (a ring of 2 leaves no tile of slack when a peer
#      is late); 4 slots gain < 1 %, and chunks past 32 KiB nothing;
#   2. `check` at world 4 in one process with the new default: the sweep,
#      the back-to-back stress, the 1000 CUDA-graph replays (not run
#      since v17's layout change), free-running, fused norm,
#      scatter/gather, types, symmetric buffers;
#   3. `faults-suite --nproc 4`, every case (v17 ran only the late ones
#      after the abort word moved).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cc && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
bench() { # name, shape, args...
    local name=$1 shape=$2
    shift 2
    INTRANODE_PUSH_LAUNCH=$shape timeout 80 $D/intranode-run --failure-wait-secs 5 --timeout 70 --nproc-per-node 4 -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --min-bytes 67108864 --max-bytes 1073741824 --out /tmp/cc-out "$@" >$L/$name.log 2>&1
    echo "== $name ('${shape:-default}') rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
{
echo "== 1. push all-reduce shapes, world 4 (doubled by default)"
bench s3c32 "slots=3,lookahead=1,chunk=65536,scratch=159383552" --algos push,nccl
bench s3c14 "slots=3,lookahead=1,scratch=67108864" --algos push
bench s3c21 "slots=3,lookahead=1,scratch=100663296" --algos push
bench s3c64 "slots=3,lookahead=1,chunk=65536,scratch=318767104" --algos push
bench s4l1 "slots=4,lookahead=1,chunk=65536,scratch=209715200" --algos push
bench s4l2 "slots=4,lookahead=2,chunk=65536,scratch=209715200" --algos push
echo "== 2. check, world 4 ($SECONDS s)"
INTRANODE_REQUIRE_GPUS=4 timeout 235 $D/intranode-run --failure-wait-secs 5 --timeout 230 --nproc-per-node 4 -- \
    $D/intranode-suite check --stress-calls 2000 --free-replays 10 >$L/check_w4.log 2>&1
echo "rc=$? ($SECONDS s)"
grep -v "done, last" $L/check_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-260 | head -12
left=$((575 - SECONDS))
echo "== 3. faults-suite --nproc 4 ($SECONDS s; $left s left)"
INTRANODE_REQUIRE_GPUS=4 timeout $left $D/intranode-suite faults-suite --nproc 4 >$L/faults_w4.log 2>&1
echo "rc=$? ($SECONDS s)"
grep -cE "^faults-suite: PASS" $L/faults_w4.log
grep -E "^faults-suite: FAIL|cases|^intranode-suite" $L/faults_w4.log | cut -c1-200 | head -8
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callC.tgz -C $D logs
