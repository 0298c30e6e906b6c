#!/bin/bash
# v15: the GPU tests and examples of the device bundle (a subset of its
# run-tests.sh that fits one carry beside the tree), every one with
# cudarc's defaults; run from the unpacked bundle folder with
# INTRANODE_REQUIRE_GPUS set. Prints each binary's summary and rc.
set -u
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0
export INTRANODE_TEST_BIN_DIR="$(pwd)"
fail=0
for t in test-gpu_cast test-gpu_elementwise test-gpu_kept_kernels test-gpu_nccl_methods \
    test-intranode test-nccl_parity test-symm_check test-intranode_examples test-ptx_scopes; do
    ./$t --test-threads=1 >/tmp/$t.log 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail=1
    echo "== $t rc=$rc: $(grep -E '^test result' /tmp/$t.log | tail -1)"
    grep -E "FAILED|panicked" /tmp/$t.log | head -3
done
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
    ./intranode-run --nproc-per-node "$gpus" -- ./$e >/tmp/$e.log 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail=1
    echo "== $e rc=$rc"
    tail -2 /tmp/$e.log
done
echo "== rc=$fail"
exit $fail
