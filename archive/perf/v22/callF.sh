#!/bin/bash
# v22 call F (4 GPUs): NOTE [call count] (the Lamport forms count their
# calls at the start with one relaxed 8-byte atomic, no end barrier, no
# release) against the build before it (call D's), alternating, two turns:
#   1. the Lamport forms and NCCL at 1 KiB-4 MiB, world 4;
#   2. decode at TP4, none / fused / fused-prefetch, both models;
# then, on the new build only, correctness: `check` stress, graph, norm,
# scatter-gather and symmetric parts at world 4 and 8 ranks on 4 GPUs
# (stress, scatter-gather), GPU tests and examples (cudarc's defaults),
# and auto / NCCL 1 KiB-64 MiB at world 4 and 2.
# Prediction: -0.3 us a call at every size (call E's relaxed-atomic
# experiment: -0.29 to -0.36 us), so 1 KiB at ~2.6 us (0.29x NCCL).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22f && mkdir -p $D
for f in bundle/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $1 | awk '{printf "%s %s %s %s; ", $2, substr($3,1,9), $(NF-2), $(NF-1)}'; echo; }
{
for turn in 1 2; do
for b in intranode-bench-old intranode-bench; do
    timeout 100 $D/intranode-run --nproc-per-node 4 --timeout 95 -- $D/$b bench --ks 16 --graph-only \
        --no-decode --no-skew --algos lamport,lamport-two-shot,nccl --min-bytes 1024 --max-bytes 4194304 \
        --out $D/o >$D/lam_${turn}_$b.log 2>&1
    echo "== turn $turn $b rc=$? ($SECONDS s)"; rows $D/lam_${turn}_$b.log
    timeout 60 $D/intranode-run --nproc-per-node 4 --timeout 55 -- $D/$b decode \
        --batches 1,8,64 --variants none,fused,fused-prefetch --check false --out $D/d >$D/dec_${turn}_$b.log 2>&1
    echo "== decode rc=$? ($SECONDS s)"
    grep -E "^\| llama" $D/d/decode_w4.md | awk -F'|' '{printf "%s b%s %s %s %s; ", substr($2,8,3), $3+0, $4, $6+0, $9+0}'; echo
done
done
export INTRANODE_REQUIRE_GPUS=4
for part in "stress --stress-calls 2000" graph norm scatter-gather symmetric; do
    set -- $part; part=$1
    [ $SECONDS -gt 420 ] && { echo "== check --only-$part skipped ($SECONDS s)"; continue; }
    timeout 120 $D/intranode-run --timeout 115 --nproc-per-node 4 -- $D/intranode-suite check --only-$* \
        >$D/check_$part.log 2>&1
    echo "== check --only-$part, world 4 rc=$? ($SECONDS s)"; grep -E "check rank 0|FAIL|rror" $D/check_$part.log | head -2 | cut -c1-250
done
for part in "stress --stress-calls 1000" scatter-gather; do
    set -- $part; part=$1
    [ $SECONDS -gt 440 ] && { echo "== 8 ranks --only-$part skipped ($SECONDS s)"; continue; }
    timeout 100 $D/intranode-run --failure-wait-secs 10 --timeout 95 --nproc-per-node 8 \
        --gpus 0,1,2,3,0,1,2,3 -- $D/intranode-suite check --only-$* >$D/check8_$part.log 2>&1
    echo "== check --only-$part, 8 ranks on 4 GPUs rc=$? ($SECONDS s)"; grep -E "^\[0\] check|FAIL|rror|wrong" $D/check8_$part.log | head -2 | cut -c1-250
done
export INTRANODE_TEST_BIN_DIR=$D
for t in test-intranode test-ptx_scopes test-intranode_examples; do
    (cd $D && timeout 150 ./$t --test-threads=1) >$D/$t.log 2>&1
    echo "== $t rc=$? ($SECONDS s): $(grep -E '^test result' $D/$t.log | tail -1)"
    grep -E "FAILED|panicked|SKIPPED" $D/$t.log | head -3
done
for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
    timeout 60 $D/intranode-run --timeout 55 --nproc-per-node 4 -- $D/$e >$D/$e.log 2>&1
    echo "== $e rc=$? ($SECONDS s)"; tail -1 $D/$e.log | cut -c1-200
done
unset INTRANODE_REQUIRE_GPUS
for w in 4 2; do
    [ $SECONDS -gt 500 ] && { echo "== auto, world $w skipped ($SECONDS s)"; continue; }
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 120 $D/intranode-run --nproc-per-node $w --timeout 115 -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --algos auto,nccl \
        --min-bytes 1024 --max-bytes 67108864 --out $D/o$w >$D/auto_w$w.log 2>&1
    echo "== auto, world $w rc=$? ($SECONDS s)"; rows $D/auto_w$w.log
done
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary_f.txt
tar czf $OUT/logs_f.tgz -C $D $(cd $D && ls *.log)
