#!/bin/bash
# v17 call 4 (4 H100 or H200, lent again): call 2's question at world 4,
# then the checks of call 3 that fit.
#   1. push all-reduce, world 4: the default 132 x 512 against
#      `blocks=264,threads=256` (two blocks per SM), two turns, NCCL in
#      the first; prediction: if a block's per-tile signal idles its SM
#      at 4 ranks (v15's fit: ~4.4 us per tile), 1 GiB moves from ~4940
#      toward ~4530 us; 2 H200 at world 2 showed no change (call 2b);
#   2. push reduce-scatter and all-gather, world 4, the same two shapes
#      (2 H200 at world 2: RS -12 to -15 % from 256 MiB, AG -3 % there
#      but +10 % at 64 MiB);
#   3. reduce-scatter, world 2 (GPUs 0,1), auto against NCCL: the 2-rank
#      RS now doubles its blocks by default;
#   4. GPU tests and examples (cudarc's defaults), world 4;
#   5. `check`, every form, world 4, in the time left (MAX_BLOCKS 264
#      moved every form's flags).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/c4 && mkdir -p $D/logs
for f in bundle-c3/*.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
bench() { # name, world, shape, args...
    local name=$1 w=$2 shape=$3
    shift 3
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 90 \
        $D/intranode-run --failure-wait-secs 5 --timeout 80 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 200 \
        --out /tmp/c4-out "$@" >$L/$name.log 2>&1
    echo "== $name (w$w, '${shape:-default}') rc=$?"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
HALF="blocks=264,threads=256"
{
bench ar_w4_default 4 "" --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824
bench ar_w4_half 4 "$HALF" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w4_default2 4 "" --algos push --min-bytes 67108864 --max-bytes 1073741824
bench ar_w4_half2 4 "$HALF" --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
bench rs_w4_half 4 "$HALF" --collective reduce-scatter --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
bench rs_w4_default 4 "" --collective reduce-scatter --algos push --min-bytes 67108864 --max-bytes 1073741824
bench ag_w4_half 4 "$HALF" --collective all-gather --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
bench ag_w4_default 4 "" --collective all-gather --algos push --min-bytes 67108864 --max-bytes 1073741824
bench rs_w2_auto 2 "" --collective reduce-scatter --algos auto,nccl --min-bytes 67108864 --max-bytes 1073741824
echo "== 4. GPU tests and examples ($SECONDS s)"
(
    cd $D && export INTRANODE_TEST_BIN_DIR=$D INTRANODE_REQUIRE_GPUS=4
    for t in test-gpu_kept_kernels test-gpu_nccl_methods test-intranode test-nccl_parity test-symm_check \
        test-intranode_examples test-ptx_scopes; do
        timeout 60 ./$t --test-threads=1 >$L/$t.log 2>&1
        echo "$t rc=$? $(grep -E '^test result' $L/$t.log | tail -1)"
    done
    for e in 01_data_parallel 02_cuda_graph 03_symmetric; do
        timeout 40 ./intranode-run --nproc-per-node 4 -- ./$e >$L/$e.log 2>&1
        echo "$e rc=$?"
    done
)
left=$((575 - SECONDS))
echo "== 5. check, every form, world 4 ($SECONDS s; ${left} s left)"
INTRANODE_REQUIRE_GPUS=4 timeout $left $D/intranode-run --failure-wait-secs 5 --timeout $((left - 5)) \
    --nproc-per-node 4 -- $D/intranode-suite check >$L/check_w4.log 2>&1
echo "rc=$?"; grep -v "done, last" $L/check_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-260 | head -5
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/call4.tgz -C $D logs
