#!/bin/bash
# v17 call 2b (2 GPUs; call 2, the same on 4 GPUs, was refused: no 4-GPU kind was lent then): two push blocks per SM (MAX_BLOCKS 160 -> 264,
# `blocks=264,threads=256`) against the default 132 x 512, NCCL beside.
# Prediction (archive/perf/v17/NOTES.md): if a block's per-tile signal (bar,
# fence.acq_rel.sys, counter stores) idles its SM, a second block on the
# SM hides it and the push all-reduce at 1 GiB on 4 ranks moves from
# ~4940 toward ~4530 us with the default scratch; if not, no change.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/c2 && mkdir -p $D/logs
for f in bundle-c2/*.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
bench() { # name, world, shape, args...
    local name=$1 w=$2 shape=$3
    shift 3
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 100 \
        $D/intranode-run --failure-wait-secs 5 --timeout 90 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 200 \
        --out /tmp/c2-out "$@" >$L/$name.log 2>&1
    echo "== $name (w$w, '${shape:-default}') rc=$?"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
HALF="blocks=264,threads=256"
BIG="chunk=65536,slots=3,lookahead=1,scratch=159383552"
{
bench ar_w2_default 2 "" --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824
bench ar_w2_half 2 "$HALF" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w2_half64 2 "$HALF,scratch=67108864" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w2_default2 2 "" --algos push --min-bytes 16777216 --max-bytes 1073741824
bench ar_w2_half2 2 "$HALF" --algos push,nccl --min-bytes 16777216 --max-bytes 1073741824
bench rs_w2_default 2 "" --collective reduce-scatter --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
bench rs_w2_half 2 "$HALF" --collective reduce-scatter --algos push --min-bytes 67108864 --max-bytes 1073741824
bench ag_w2_default 2 "" --collective all-gather --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
bench ag_w2_half 2 "$HALF" --collective all-gather --algos push --min-bytes 67108864 --max-bytes 1073741824
for w in 2 4; do
    echo "== check --only-stress --algos push, $w ranks on 2 GPUs, $HALF"
    INTRANODE_PUSH_LAUNCH=$HALF timeout 150 $D/intranode-run --timeout 140 --nproc-per-node $w -- \
        $D/intranode-suite check --only-stress --algos push >$L/check_stress_half_w$w.log 2>&1
    echo "rc=$?"; grep -E "^\[0\] check|FAIL|rror" $L/check_stress_half_w$w.log | cut -c1-250 | head -3
done
echo "== check --only-scatter-gather, w2, $HALF"
INTRANODE_PUSH_LAUNCH=$HALF timeout 70 $D/intranode-run --timeout 60 --nproc-per-node 2 -- \
    $D/intranode-suite check --only-scatter-gather >$L/check_sg_half.log 2>&1
echo "rc=$?"; grep -E "^\[0\] check|FAIL|rror" $L/check_sg_half.log | cut -c1-250 | head -3
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/call2b.tgz -C $D logs
