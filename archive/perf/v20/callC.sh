#!/bin/bash
# v20 call C (4 GPUs): `old` is 97703c9 (v19's code), `fin` this tree:
# push chunks in whole lines, the all-gather's rings at 4 ranks (32 KiB
# chunks in 76 MiB), reduce-scatter and all-gather ours at every size
# at 4 ranks.
#   1. The all-gather at world 4, old default against fin (auto, push,
#      NCCL), 32 MiB-1 GiB; the reduce-scatter's auto against NCCL.
#      Prediction: the all-gather at 64 MiB / 256 MiB / 1 GiB near call
#      A's 32 KiB rows (173 / 618 / 2379 us), against ~181 / 644 / 2470.
#   2. The second turn of call B's whole-line rows: the push all-reduce
#      at world 4 and 2 (GPUs 0,1), old against fin, 4-64 MiB.
#   3. check --only-scatter-gather at world 4; check --only-stress
#      --algos push at world 4 and 2; faults-suite --only push at 4.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cc && mkdir -p $D/logs $D/old $D/fin
for f in bundle/intranode-{run,suite}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
for b in old fin; do gzip -dc bundle/$b-intranode-bench.gz >$D/$b/intranode-bench && chmod +x $D/$b/intranode-bench; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
bench() { # name, build, world, algos, args...
    local name=$1 b=$2 w=$3 algos=$4
    shift 4
    late 330 $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node $w -- \
        $D/$b/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/cc-out "$@" >$L/$name.log 2>&1
    echo "== $name ($b, world $w, $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror|auto within|auto is" $L/$name.log | head -3
    rows $L/$name.log
}
check() { # name, world, limit, args...
    local name=$1 w=$2 t=$3
    shift 3
    late $((540 - t)) $name && return
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_REQUIRE_GPUS=$w timeout $((t + 5)) \
        $D/intranode-run --timeout $t --nproc-per-node $w -- $D/intranode-suite check "$@" >$L/check_$name.log 2>&1
    echo "== check $name (world $w) $* rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_$name.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
}
{
nvidia-smi -L
for r in a b; do
    [ $r = a ] && sz="--min-bytes 67108864 --max-bytes 1073741824" || sz="--min-bytes 33554432 --max-bytes 536870912"
    bench all-gather_old_$r old 4 push --collective all-gather $sz
    bench all-gather_fin_$r fin 4 auto,push,nccl --collective all-gather $sz
    bench reduce-scatter_fin_$r fin 4 auto,nccl --collective reduce-scatter $sz
done
for w in 4 2; do
    for r in a b; do
        [ $r = a ] && sz="--min-bytes 4194304 --max-bytes 67108864" || sz="--min-bytes 8388608 --max-bytes 33554432"
        bench ar_w${w}_old_$r old $w push $sz
        bench ar_w${w}_fin_$r fin $w push,nccl $sz
    done
done
check sg_w4 4 40 --only-scatter-gather
check stress_push_w4 4 70 --only-stress --algos push
check stress_push_w2 2 60 --only-stress --algos push
if ! late 440 faults; then
    INTRANODE_REQUIRE_GPUS=4 timeout $((545 - SECONDS)) $D/intranode-suite faults-suite --nproc 4 --only push >$L/faults_push_w4.log 2>&1
    echo "== faults-suite --only push, world 4 rc=$? ($SECONDS s)"
    grep -E "^faults-suite: (PASS|FAIL)|cases" $L/faults_push_w4.log | cut -c1-200
fi
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callC.tgz -C $D logs
