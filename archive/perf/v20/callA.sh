#!/bin/bash
# v20 call A (4 GPUs), tree 97703c9 (v19's final code):
#   1. item 4: the push reduce-scatter and all-gather at world 4 on the
#      default 33 MiB of rings, on 76 MiB (`scratch=79691776`) and on 76
#      MiB with chunks of at most 32 KiB, 32 MiB-1 GiB (NCCL beside the
#      default): where a larger ring budget starts to pay (v19 call G: it
#      loses 3-4 % at 64 MiB, gains 4-5 % from 256 MiB).
#   2. auto and NCCL at world 4, 1 KiB-1 GiB: the table.
#   3. ../shared/anchors/peers_graph.py at world 4 (NCCL, PyTorch
#      one-shot and two-shot; then NCCL symmetric to 1 MiB), same machine.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=/tmp/ca && mkdir -p $D/logs
for f in bundle/intranode-{run,bench}.gz; do n=$(basename $f .gz); gzip -dc $f >$D/$n && chmod +x $D/$n; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
late() { [ $SECONDS -gt $1 ] && echo "== $2 skipped: $SECONDS s gone"; }
bench() { # name, shape, algos, args...
    local name=$1 shape=$2 algos=$3
    shift 3
    late 300 $name && return
    INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node 4 -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/ca-out "$@" >$L/$name.log 2>&1
    echo "== $name ('${shape:-default}', $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror|auto within|auto is" $L/$name.log | head -3
    rows $L/$name.log
}
{
nvidia-smi -L
for c in reduce-scatter all-gather; do
    for shape in "" "scratch=79691776" "scratch=79691776,chunk=32768"; do
        tag=$(echo "${shape:-default}" | tr '=,' '__')
        algos=push; [ -z "$shape" ] && algos=push,nccl
        bench ${c}_${tag}_a "$shape" $algos --collective $c --min-bytes 67108864 --max-bytes 1073741824
        [ "$shape" = "scratch=79691776,chunk=32768" ] && continue
        bench ${c}_${tag}_b "$shape" $algos --collective $c --min-bytes 33554432 --max-bytes 536870912
    done
done
bench ar_w4_auto "" auto,nccl --min-bytes 1024 --max-bytes 1073741824
cp bundle/peers_graph.py $D/
for mode in plain symm; do
    late 470 torch_$mode && continue
    sizes=2048,65536,262144,524288,1048576,4194304,16777216,67108864,268435456,1073741824
    [ $mode = symm ] && sizes=2048,65536,262144,1048576
    (cd $D && MODE=$mode SIZES=$sizes OUT=$L timeout 120 python3 -m torch.distributed.run \
        --nproc_per_node=4 peers_graph.py) >$L/torch_$mode.log 2>&1
    echo "== torch $mode rc=$? ($SECONDS s)"
    grep -A14 "^ANCHORS" $L/torch_$mode.log
done
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/callA.tgz -C $D logs
