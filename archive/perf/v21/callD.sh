#!/bin/bash
# v21 call D (4 GPUs), the final tree (9ee4dde: copy4's tail four at a
# time, auto's push form from 32 MiB at 4 ranks):
#   1. world 4: auto, push and NCCL at 16-64 MiB, two turns (the new
#      crossover; prediction: push at 32 MiB ~167 us, NCCL ~173-174);
#      auto and NCCL at 1 KiB-1 GiB; world 2 (GPUs 0,1) auto and NCCL
#      against the reference log.
#   2. GPU tests and examples with cudarc's defaults,
#      INTRANODE_REQUIRE_GPUS=4.
#   3. The full `intranode-suite check` at world 4 (copy4 is in every
#      push copy and the two-shot's gather), counts cut to fit.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/dd && mkdir -p $D/logs
for f in bundle/*.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
{
nvidia-smi -L
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
bench() { # name, world, algos, args...
    local name=$1 w=$2 algos=$3
    shift 3
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 120 $D/intranode-run --failure-wait-secs 5 --timeout 115 \
        --nproc-per-node $w -- $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/dd-out "$@" >$L/$name.log 2>&1
    echo "== 1. $name (world $w, $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror|auto within|auto is" $L/$name.log | head -3
    rows $L/$name.log
}
for turn in 1 2; do
    bench ar_w4_mid_$turn 4 auto,push,nccl --min-bytes 16777216 --max-bytes 67108864
done
bench ar_w4_auto 4 auto,nccl --min-bytes 1024 --max-bytes 1073741824
bench ar_w2_auto 2 auto,nccl --min-bytes 1024 --max-bytes 1073741824
export INTRANODE_REQUIRE_GPUS=4 INTRANODE_TEST_BIN_DIR=$D
for t in test-gpu_nccl_methods test-intranode test-nccl_parity test-symm_check test-intranode_examples test-ptx_scopes; do
    (cd $D && timeout 120 ./$t --test-threads=1) >$L/$t.log 2>&1
    echo "== 2. $t rc=$? ($SECONDS s): $(grep -E '^test result' $L/$t.log | tail -1)"
    grep -E "FAILED|panicked|SKIPPED" $L/$t.log | head -3
done
for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
    timeout 60 $D/intranode-run --timeout 55 --nproc-per-node 4 -- $D/$e >$L/$e.log 2>&1
    echo "== 2. $e rc=$? ($SECONDS s)"
    tail -1 $L/$e.log | cut -c1-200
done
T=$((530 - SECONDS))
timeout $T $D/intranode-run --timeout $((T - 5)) --nproc-per-node 4 -- $D/intranode-suite check \
    --stress-calls 3000 --graph-replays 300 --free-replays 10 >$L/check_w4.log 2>&1
echo "== 3. check, world 4 rc=$? ($SECONDS s, limit $T s)"
grep -v "done, last" $L/check_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-250 | head -14
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/dd.tgz -C $D logs
