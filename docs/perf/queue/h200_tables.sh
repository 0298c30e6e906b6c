#!/bin/bash
# For a machine of 4 H200: the all-reduce, reduce-scatter and all-gather
# tables at 4 GPUs have H100 figures only (2 H200 ran the world-2 table;
# the first 4-H200 machine ran auto and NCCL to 256 MiB only). Compare with
# docs/perf/results/ and, across machines, with NCCL in the same run.
# 1. auto and NCCL at world 4, 1 KiB-1 GiB (graph of 16, free-running);
#    auto, push and NCCL at 32 MiB (where auto takes the push form at 4);
# 2. reduce-scatter and all-gather at world 4, auto and NCCL, 32 MiB-1
#    GiB (the all-gather on rings of its own: 32 KiB chunks in 76 MiB);
# 3. auto and NCCL at world 2 on GPUs 0,1, 1 KiB-1 GiB;
# 4. ../shared/anchors/peers_graph.py at world 4 (or bundle/peers_graph.py),
#    where it is found: NCCL, PyTorch one-shot and two-shot.
# Every result is checked by the bench.
# Usage (lib.sh, bundle: intranode-run, intranode-bench):
#   OUT=DIR bash docs/perf/queue/h200_tables.sh
# Writes summary.txt and logs.tgz; about 5 minutes.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
queue_start intranode-run intranode-bench
bench() { # name, world, algos, args...
    local name=$1 w=$2 algos=$3
    shift 3
    past 420 "$name" && return
    CUDA_VISIBLE_DEVICES=$(first_gpus $w) ranks 100 $w -- \
        $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out $D/out-$name "$@" >$L/$name.log 2>&1
    echo "== $name (world $w, $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror|auto within|auto is" $L/$name.log | head -3
    rows $L/$name.log
}
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
bench ar_w4 4 auto,nccl --min-bytes 1024 --max-bytes 1073741824
bench ar_w4_32m 4 auto,push,nccl --min-bytes 33554432 --max-bytes 33554432
for c in reduce-scatter all-gather; do
    bench ${c}_w4_a 4 auto,nccl --collective $c --min-bytes 67108864 --max-bytes 1073741824
    bench ${c}_w4_b 4 auto,nccl --collective $c --min-bytes 33554432 --max-bytes 536870912
done
bench ar_w2 2 auto,nccl --min-bytes 1024 --max-bytes 1073741824
P=""
for f in ../shared/anchors/peers_graph.py bundle/peers_graph.py; do [ -f "$f" ] && P=$f && break; done
if [ -n "$P" ] && [ $SECONDS -lt 450 ]; then
    cp "$P" $D/peers_graph.py
    (cd $D && MODE=plain OUT=$L SIZES=2048,65536,262144,524288,1048576,4194304,16777216,67108864,268435456,1073741824 \
        timeout 120 python3 -m torch.distributed.run --nproc_per_node=4 peers_graph.py) >$L/torch_plain_w4.log 2>&1
    echo "== peers_graph plain, world 4 rc=$? ($SECONDS s)"
    grep -A12 "^ANCHORS" $L/torch_plain_w4.log
else
    echo "== peers_graph skipped (not found, or $SECONDS s gone)"
fi
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
queue_logs
