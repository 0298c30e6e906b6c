#!/bin/bash
# Queued (issue 34; written in v20) for a machine of 4 H200: the issue's
# tables have 4-GPU figures on H100 only (docs/perf/v21/NOTES.md; 2 H200
# ran the world-2 table in v21 call B; v22 call G, on the first 4-H200
# machine, ran auto and NCCL to 256 MiB only: docs/perf/v22/NOTES.md). From the repo
# root with intranode-run.gz and intranode-bench.gz (`cargo xtask
# device-bundle`) in bundle/:
#   OUT=DIR bash docs/perf/queue/h200_tables.sh
# 1. auto and NCCL at world 4, 1 KiB-1 GiB (graph of 16, free-running);
#    auto, push and NCCL at 32 MiB (auto's push form from there since v21);
# 2. reduce-scatter and all-gather at world 4, auto and NCCL, 32 MiB-1
#    GiB (the all-gather's rings of v20: 32 KiB chunks in 76 MiB);
# 3. auto and NCCL at world 2 on GPUs 0,1, 1 KiB-1 GiB;
# 4. ../shared/anchors/peers_graph.py at world 4 (or bundle/peers_graph.py),
#    where it is found: NCCL, PyTorch one-shot and two-shot.
# Every result is checked by the bench. Writes summary.txt and
# logs.tgz; about 5 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=/tmp/h200-tables && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $5, $6, $7, $8}'; }
bench() { # name, world, algos, args...
    local name=$1 w=$2 algos=$3
    shift 3
    [ $SECONDS -gt 420 ] && { echo "== $name skipped: $SECONDS s gone"; return; }
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 100 \
        $D/intranode-run --failure-wait-secs 5 --timeout 95 --nproc-per-node $w -- \
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
tar czf $OUT/logs.tgz -C $D logs
