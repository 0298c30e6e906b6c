#!/bin/bash
# v19 call F (4 GPUs), the final tree:
#   1. the GPU tests and examples of the device bundle with cudarc's
#      defaults (event tracking on), INTRANODE_REQUIRE_GPUS=4 (a subset of
#      its run-tests.sh, as archive/perf/v15/run-gpu-tests.sh);
#   2. the full `intranode-suite check` at world 4 (sweep, back-to-back
#      calls, graph, free-running, fused norm, reduce-scatter and
#      all-gather, symmetric buffers, barriers), counts cut to fit.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4
D=/tmp/cf && mkdir -p $D/logs
for f in bundle/*.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
{
nvidia-smi -L
export INTRANODE_TEST_BIN_DIR=$D
for t in test-gpu_cast test-gpu_elementwise test-gpu_kept_kernels test-gpu_nccl_methods \
    test-intranode test-nccl_parity test-symm_check test-intranode_examples test-ptx_scopes; do
    (cd $D && timeout 120 ./$t --test-threads=1) >$L/$t.log 2>&1
    echo "== 1. $t rc=$? ($SECONDS s): $(grep -E '^test result' $L/$t.log | tail -1)"
    grep -E "FAILED|panicked|SKIPPED" $L/$t.log | head -3
done
for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
    timeout 60 $D/intranode-run --timeout 55 --nproc-per-node 4 -- $D/$e >$L/$e.log 2>&1
    echo "== 1. $e rc=$? ($SECONDS s)"
    tail -1 $L/$e.log | cut -c1-200
done
T=$((420 - SECONDS))
timeout $T $D/intranode-run --timeout $((T - 5)) --nproc-per-node 4 -- $D/intranode-suite check \
    --stress-calls 3000 --graph-replays 300 --free-replays 10 >$L/check_w4.log 2>&1
echo "== 2. check, world 4 rc=$? ($SECONDS s)"
grep -v "done, last" $L/check_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-250 | head -14
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callF.tgz -C $D logs
