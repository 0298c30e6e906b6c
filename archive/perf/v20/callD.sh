#!/bin/bash
# v20 call D (4 GPUs), the final tree:
#   1. auto and NCCL at world 2 (GPUs 0,1), 1 KiB-1 GiB: nothing at 2
#      GPUs slower than the reference log (whole-line chunks move the
#      2-rank push form's chunk at 8-32 MiB).
#   2. GPU tests and examples with cudarc's defaults,
#      INTRANODE_REQUIRE_GPUS=4 (the kernel-only binaries are left out:
#      no kernel changed).
#   3. The full `intranode-suite check` at world 4, counts cut to fit.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cd && mkdir -p $D/logs
for f in bundle/*.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
{
nvidia-smi -L
CUDA_VISIBLE_DEVICES=0,1 timeout 120 $D/intranode-run --failure-wait-secs 5 --timeout 115 --nproc-per-node 2 -- \
    $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
    --algos auto,nccl --min-bytes 1024 --max-bytes 1073741824 --out /tmp/cd-out >$L/ar_w2_auto.log 2>&1
echo "== 1. auto world 2 rc=$? ($SECONDS s)"
grep -E "FAIL|mismatch|rror|auto within|auto is" $L/ar_w2_auto.log | head -3
grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $L/ar_w2_auto.log | awk '{print $2, $3, $4, $6, $7, $8}'
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
tar czf $OUT/callD.tgz -C $D logs
