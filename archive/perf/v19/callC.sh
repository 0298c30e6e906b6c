#!/bin/bash
# v19 call C (4 GPUs), the tree with v19's defaults:
#   1. auto and NCCL at world 4, 16 MiB-1 GiB: auto takes the push form
#      (its own rings) from 64 MiB now; its verdict against the fastest.
#   2. The reduce-scatter and all-gather at world 4: back on 33 MiB of
#      rings (`push_ring_bytes`), as call B's `scratch=34603008` rows.
#   3. The reduce-scatter at world 3, now doubled by default, against
#      `double=0`: the second turn of call B's 3-rank rows.
#   4. `check --only-scatter-gather` at world 4 and 3, and the
#      faults-suite's push cases at world 4 (3-slot rings, lookahead 1).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cc && mkdir -p $D/logs
for f in bundle/intranode-{run,bench,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
bench() { # name, world, shape, algos, args...
    local name=$1 w=$2 shape=$3 algos=$4
    shift 4
    late 330 $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/cc-out "$@" >$L/$name.log 2>&1
    echo "== $name (world $w, '${shape:-default}', $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror|auto within|auto is" $L/$name.log | head -3
    rows $L/$name.log
}
{
nvidia-smi -L
bench ar_w4_auto 4 "" auto,nccl --min-bytes 16777216 --max-bytes 1073741824
for c in reduce-scatter all-gather; do
    bench ${c}_w4 4 "" push,nccl --collective $c --min-bytes 67108864 --max-bytes 1073741824
done
bench reduce-scatter_w3 3 "" push,nccl --collective reduce-scatter --min-bytes 67108864 --max-bytes 1073741824
bench reduce-scatter_w3_single 3 "double=0" push --collective reduce-scatter --min-bytes 67108864 --max-bytes 1073741824
for w in 4 3; do
    late 400 sg_w$w && continue
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_REQUIRE_GPUS=$w timeout 65 $D/intranode-run --timeout 60 \
        --nproc-per-node $w -- $D/intranode-suite check --only-scatter-gather >$L/check_sg_w$w.log 2>&1
    echo "== 4. check --only-scatter-gather, world $w rc=$? ($SECONDS s)"
    grep -E "^\[0\] check|FAIL|rror|wrong" $L/check_sg_w$w.log | cut -c1-230 | head -3
done
if ! late 420 faults; then
    INTRANODE_REQUIRE_GPUS=4 timeout $((530 - SECONDS)) $D/intranode-suite faults-suite --nproc 4 --only push >$L/faults_push_w4.log 2>&1
    echo "== 4. faults-suite --only push, world 4 rc=$? ($SECONDS s)"
    grep -E "^faults-suite: (PASS|FAIL)|cases" $L/faults_push_w4.log | cut -c1-200
fi
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callC.tgz -C $D logs
