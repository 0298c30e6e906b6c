#!/bin/bash
# The Lamport one-shot, two-shot and fused norm with their first input
# loads issued before the call count's atomic, and the last block's add a
# `red` (NOTE [loads before the count], kernels-gpu/src/prims/slots.rs):
# not yet run on a GPU. No A/B in one call: compare with the last 4-H100
# tables of the Lamport forms (CHANGELOG.md) and, robust across machines,
# with NCCL in the same run.
# Prediction: -0.2 to -0.4 us a call for the one-shot (1 KiB 2.46 ->
# ~2.15 us on 4 H100) and the two-shot, and for the fused norm in
# decode; nothing slower anywhere.
#
# On 4 GPUs or more it uses GPUs 0-3 (and 0,1 for world 2); on 2, world 2
# only; on 1, correctness only (4 ranks on the one GPU). Correctness first:
#   1. `check` stress (2000 calls), graph, norm (half the fused calls
#      prefetching) and scatter-gather at world 4; stress and
#      scatter-gather with 8 ranks on 4 GPUs (every W=8 kernel);
#   2. `faults-suite --only lamport` (a skipped call, late ranks at both
#      Lamport forms, a killed rank);
#   3. the Lamport forms, auto and NCCL at 1 KiB-4 MiB, world 4 then 2,
#      two turns (graph of 16, free-running, every result checked);
#   4. decode at TP4: none / nccl / ours / fused / fused-prefetch, 8B and
#      70B, batches 1, 8, 64, two turns;
#   5. the GPU tests (`INTRANODE_REQUIRE_GPUS`);
# and, before the sweeps, `intranode-bench hop` at world 4 and 2 with the
# store floor (graphs of kernels storing 16 bytes into this GPU, into the
# next rank, into every rank: what a kernel's end costs after stores into
# peers). Prediction: the peer stores cost 0.5-1.3 us more a kernel than
# the local one (the acknowledgment's way back), which would account for
# the one-shot's ~1 us beyond launch and hop. Then `intranode-bench
# phases` at world 4 and 2: the Lamport one-shot and two-shot with each
# phase stamped on the GPU's clock (1 KiB-4 MiB), and the gap from a
# call's end to the next call's start.
# Usage (lib.sh, the whole bundle): OUT=DIR bash docs/perf/queue/lamport_early_loads.sh
# Writes summary.txt and logs.tgz; about 5 minutes on 4 GPUs.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FAILURE_WAIT_S=10
queue_start
for b in intranode-run intranode-bench intranode-suite; do
    [ -x $D/$b ] || { echo "bundle/$b.gz missing" | tee $OUT/summary.txt; exit 1; }
done
row_line() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $1 | awk '{printf "%s %s %s %s; ", $2, substr($3,1,9), $(NF-2), $(NF-1)}'; echo; }
run() { # timeout, ranks, gpus ("" = the first ranks), command...
    local t=$1 n=$2 g=$3
    shift 3
    if [ -n "$g" ]; then
        INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 ranks $t $n --gpus $g -- "$@"
    else
        ranks $t $n -- "$@"
    fi
}
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
git log -1 --format='commit %h %s' 2>/dev/null | cut -c1-100
echo "GPUs: $N"
[ "$N" -ge 1 ] || { echo "no GPU"; exit 1; }
G4=""
[ "$N" -lt 4 ] && G4=$(first_gpus $N | awk -F, '{for (i = 0; i < 4; i++) printf "%s%s", (i ? "," : ""), $((i % NF) + 1)}')
export INTRANODE_REQUIRE_GPUS=1
for part in "stress --stress-calls 2000" graph norm scatter-gather; do
    set -- $part
    name=$1
    past 200 "check --only-$name" && continue
    run 120 4 "$G4" $D/intranode-suite check --only-$* >$L/check_$name.log 2>&1
    echo "== check --only-$name, 4 ranks${G4:+ on GPUs $G4} rc=$? ($SECONDS s)"
    grep -E "check rank 0|FAIL|rror|wrong" $L/check_$name.log | head -2 | cut -c1-250
done
if [ "$N" -ge 4 ]; then
    for part in "stress --stress-calls 1000" scatter-gather; do
        set -- $part
        name=$1
        past 240 "8 ranks --only-$name" && continue
        run 100 8 0,1,2,3,0,1,2,3 $D/intranode-suite check --only-$* >$L/check8_$name.log 2>&1
        echo "== check --only-$name, 8 ranks on 4 GPUs rc=$? ($SECONDS s)"
        grep -E "^\[0\] check|FAIL|rror|wrong" $L/check8_$name.log | head -2 | cut -c1-250
    done
fi
export INTRANODE_TEST_BIN_DIR=$D
if [ "$N" -ge 4 ]; then
    CUDA_VISIBLE_DEVICES=0,1,2,3 timeout 60 $D/intranode-suite faults-suite --nproc 4 --only lamport \
        >$L/faults_lamport.log 2>&1
    echo "== faults-suite --nproc 4 --only lamport rc=$? ($SECONDS s)"
    grep -E "^faults-suite: (PASS|FAIL)|all [0-9]+ cases|failed" $L/faults_lamport.log | cut -c1-170
fi
unset INTRANODE_REQUIRE_GPUS
for w in 4 2; do
    [ "$N" -ge $w ] || continue
    CUDA_VISIBLE_DEVICES=$(first_gpus $w) run 60 $w "" $D/intranode-bench hop >$L/hop_w$w.log 2>&1
    echo "== hop, world $w rc=$? ($SECONDS s)"
    grep -E "0<->|hop:" $L/hop_w$w.log | cut -c1-250
    CUDA_VISIBLE_DEVICES=$(first_gpus $w) run 60 $w "" $D/intranode-bench phases \
        --bytes 1024,16384,65536,262144,1048576,4194304 >$L/phases_w$w.log 2>&1
    echo "== phases, world $w rc=$? ($SECONDS s)"
    grep -E "phases" $L/phases_w$w.log | cut -c1-250
done
for turn in 1 2; do
    for w in 4 2; do
        [ "$N" -ge $w ] || continue
        past 380 "sweep turn $turn, world $w" && continue
        CUDA_VISIBLE_DEVICES=$(first_gpus $w) run 100 $w "" $D/intranode-bench bench --ks 16 \
            --graph-only --no-decode --no-skew --algos lamport,lamport-two-shot,auto,nccl \
            --min-bytes 1024 --max-bytes 4194304 --out $D/o$w >$L/lamport_w${w}_$turn.log 2>&1
        echo "== Lamport forms, world $w, turn $turn rc=$? ($SECONDS s)"
        grep -E "FAIL|mismatch|rror" $L/lamport_w${w}_$turn.log | head -2
        row_line $L/lamport_w${w}_$turn.log
    done
    [ "$N" -ge 4 ] || continue
    past 400 "decode turn $turn" && continue
    CUDA_VISIBLE_DEVICES=0,1,2,3 run 60 4 "" $D/intranode-bench decode --batches 1,8,64 \
        --variants none,nccl,ours,fused,fused-prefetch --out $D/d >$L/decode_$turn.log 2>&1
    echo "== decode TP4, turn $turn rc=$? ($SECONDS s) (model batch: none us/layer; nccl ours fused fused-prefetch over none)"
    cp $D/d/decode_w4.md $L/decode_w4_$turn.md 2>/dev/null
    grep -E "^\| llama" $L/decode_w4_$turn.md 2>/dev/null | head -6
done
if [ "$N" -ge 4 ] && [ $SECONDS -lt 420 ]; then
    export INTRANODE_REQUIRE_GPUS=4
    for t in test-intranode test-ptx_scopes; do
        [ -x $D/$t ] || continue
        (cd $D && CUDA_VISIBLE_DEVICES=0,1,2,3 timeout 100 ./$t --test-threads=1) >$L/$t.log 2>&1
        echo "== $t rc=$? ($SECONDS s): $(grep -E '^test result' $L/$t.log | tail -1)"
        grep -E "FAILED|panicked" $L/$t.log | head -3
    done
fi
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
queue_logs
