#!/bin/bash
# v17 call 3 (2 GPUs): the tree with MAX_BLOCKS 264 (every form's flags
# and the push counters moved in the pad) and the 2-rank push
# reduce-scatter on doubled blocks (`PushShape::doubled`).
#   1. the GPU tests and examples that touch the collectives, with
#      cudarc's defaults;
#   2. `check`, every form, world 2;
#   3. 4 ranks on the 2 GPUs: push all-reduce stress and scatter/gather;
#   4. reduce-scatter and all-gather, auto against NCCL, 16 MiB - 1 GiB
#      (prediction: RS auto at 256 MiB ~407 us, 1 GiB ~1530 us, from
#      465 / 1805 in call 2b; AG unchanged);
#   5. faults-suite, late cases.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/c3 && mkdir -p $D/logs
for f in bundle-c3/*.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
L=$D/logs
G=$(nvidia-smi -L | grep -c '^GPU ')
R="$D/intranode-run --failure-wait-secs 5 --timeout"
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
{
echo "== 1. GPU tests and examples"
(
    cd $D && export INTRANODE_TEST_BIN_DIR=$D INTRANODE_REQUIRE_GPUS=$G
    for t in test-gpu_kept_kernels test-gpu_nccl_methods test-intranode test-nccl_parity test-symm_check \
        test-intranode_examples test-ptx_scopes; do
        timeout 120 ./$t --test-threads=1 >$L/$t.log 2>&1
        echo "$t rc=$? $(grep -E '^test result' $L/$t.log | tail -1)"
    done
    for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
        timeout 60 ./intranode-run --nproc-per-node $G -- ./$e >$L/$e.log 2>&1
        echo "$e rc=$?"
    done
)
echo "== 2. check, every form, world $G"
INTRANODE_REQUIRE_GPUS=$G timeout 240 $R 230 --nproc-per-node $G -- $D/intranode-suite check >$L/check_w$G.log 2>&1
echo "rc=$?"; grep -v "done, last" $L/check_w$G.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-260 | head -5
GG=$(for i in $(seq 0 $((G - 1))); do printf "%s,%s," $i $i; done); GG=${GG%,}
for what in "--only-stress --algos push --stress-calls 300" "--only-scatter-gather"; do
    echo "== 3. check $what, $((2 * G)) ranks on $G GPUs"
    INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_BARRIER_TIMEOUT_MS=60000 timeout 100 $R 95 \
        --nproc-per-node $((2 * G)) --gpus $GG -- $D/intranode-suite check $what >$L/check_2g.log 2>&1
    echo "rc=$?"; grep -v "done, last" $L/check_2g.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-220 | head -3
    cat $L/check_2g.log >>$L/check_2g_all.log
done
for c in reduce-scatter all-gather; do
    echo "== 4. $c, world $G, auto and NCCL"
    timeout 110 $R 100 --nproc-per-node $G -- $D/intranode-bench bench --collective $c --ks 16 --graph-only \
        --no-decode --no-skew --algos auto,nccl --min-bytes 16777216 --max-bytes 1073741824 --large-calls 200 \
        --out /tmp/c3-out >$L/${c}_w$G.log 2>&1
    echo "rc=$?"; rows $L/${c}_w$G.log
done
echo "== 5. faults-suite --only late"
INTRANODE_REQUIRE_GPUS=$G timeout 120 $D/intranode-suite faults-suite --nproc $G --only late >$L/faults_late.log 2>&1
echo "rc=$?"; grep -E "^faults-suite: (PASS|FAIL)|cases" $L/faults_late.log | cut -c1-160
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/call3.tgz -C $D logs
