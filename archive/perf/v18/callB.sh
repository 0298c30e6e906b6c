#!/bin/bash
# v18 call B (4 H100 or H200), tree with the all-reduce's push form
# doubled by default at 4 ranks (`PushShape::for_use`):
#   1. item 1: the push all-reduce at world 4, 64 MiB-1 GiB, against NCCL:
#      the new default (doubled: 264 x 256, 33 MiB of scratch, so ~10.6
#      KiB chunks), `double=0` (132 x 512, 21 KiB chunks), and doubled with
#      more scratch for longer chunks (21, 42, 64 KiB; slots=3 with 32
#      KiB), and v15's best one-block shape (64 KiB, slots=3, 152 MiB).
#      Prediction (v15's fit, ~4.4 us a tile at one block per SM): doubled
#      with 42-64 KiB chunks comes within 1 % of NCCL at 1 GiB (~4550 us);
#      if longer chunks gain nothing doubled, the per-tile cost is hidden
#      already and what is left is the link;
#   2. item 3: the decode stack at TP4 with launch overlap on and off
#      (docs/perf/queue/decode_overlap_w4.sh, one turn);
#   3. world 2 on GPUs 0,1: auto and NCCL, 1 KiB-1 GiB, against
#      ../shared/results/2026-11-27/h100x4/bench_w2_gpus01_symmetric_1GiB.log.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cb && mkdir -p $D/logs
for f in bundle/intranode-{run,bench}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
bench() { # name, world, shape, args...
    local name=$1 w=$2 shape=$3
    shift 3
    [ $SECONDS -gt 540 ] && { echo "== $name skipped at $SECONDS s"; return; }
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 70 --nproc-per-node $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --out /tmp/cb-out "$@" >$L/$name.log 2>&1
    echo "== $name (w$w, '${shape:-default}') rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
    rows $L/$name.log
}
{
echo "== 1. push all-reduce shapes, world 4"
AR="--algos push --min-bytes 67108864 --max-bytes 1073741824"
bench ar_default 4 "" --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
bench ar_one 4 "double=0" $AR
bench ar_s64 4 "scratch=67108864" $AR
bench ar_s128 4 "scratch=134217728" $AR
bench ar_c64 4 "chunk=65536,scratch=209715200" $AR
bench ar_slots3 4 "slots=3,lookahead=1,chunk=65536,scratch=159383552" $AR
bench ar_v15 4 "double=0,slots=3,lookahead=1,chunk=65536,scratch=159383552" $AR
bench ar_default2 4 "" --algos push,nccl --min-bytes 67108864 --max-bytes 1073741824
echo "== 2. decode at TP4, launch overlap on and off ($SECONDS s)"
for overlap in 1 0; do
    variants=none,ours,fused
    [ $overlap = 1 ] && variants=none,nccl,ours,fused
    INTRANODE_LAUNCH_OVERLAP=$overlap timeout 100 $D/intranode-run --nproc-per-node 4 --timeout 90 -- \
        $D/intranode-bench decode --batches 1,8,64 --variants $variants --out /tmp/cb-decode-$overlap \
        >$L/decode_overlap$overlap.log 2>&1
    echo "== overlap $overlap: rc=$? ($SECONDS s)"
    cp /tmp/cb-decode-$overlap/decode_w4.md $L/decode_overlap$overlap.md 2>/dev/null
    grep -E "^\[0\] \|" $L/decode_overlap$overlap.log | head -20
done
echo "== 3. world 2, GPUs 0,1, auto and NCCL"
bench w2_auto 2 "" --algos auto,nccl --max-bytes 1073741824
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callB.tgz -C $D logs
