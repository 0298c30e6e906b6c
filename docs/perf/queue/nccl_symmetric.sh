#!/bin/bash
# Queued for a machine of 2, 4 or 8 GPUs (H100 or H200): NCCL's
# symmetric kernels (NCCL 2.27 and later: ncclMemAlloc buffers
# registered as windows with NCCL_WIN_COLL_SYMMETRIC, graph
# replay) beside plain NCCL and our auto, every result checked, at world
# 2, 4 and 8 as the machine has GPUs (GPUs 0..w-1, one rank each), each
# world twice: NCCL's default and NCCL_GRAPH_MIXING_SUPPORT=0 (NCCL reads
# it at init, so each is a run of its own; the rows are nccl-sym and
# nccl-sym-nomix, and the plain NCCL rows of the second run run under it
# too). Sizes 1 KiB-64 MiB, graphs of 16 and 128 calls replayed
# free-running (`mean_us` is the graph of 128 without stamps, x_nccl the
# ratio to plain NCCL in the same run). Then, at the largest world, one
# 1 KiB run with NCCL_DEBUG=INFO kept for which kernels NCCL says it
# set up (grep -i sym). Multicast stays off (NCCL_NVLS_ENABLE=0).
# Usage, from the repo root with intranode-run.gz and intranode-bench.gz
# (`cargo xtask device-bundle`) in bundle/:
#   OUT=DIR bash docs/perf/queue/nccl_symmetric.sh
# Writes summary.txt and logs.tgz (each run's log and its bench_w*.json,
# .csv, .png) into $OUT; about 1 minute a run, within 9 minutes at 8 GPUs.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=/tmp/nccl-sym && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
N=$(nvidia-smi -L | grep -c '^GPU ')
L=$D/logs
go() { # tag, world, "VAR=value ..." (or ""), bench args...
    local tag=$1 w=$2 envs=$3
    shift 3
    [ $SECONDS -gt 450 ] && { echo "== $tag skipped: $SECONDS s gone"; return; }
    local t0=$SECONDS
    env $envs CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_REQUIRE_GPUS=$w timeout 110 \
        $D/intranode-run --failure-wait-secs 5 --timeout 105 --nproc-per-node $w -- \
        $D/intranode-bench bench --out $D/logs/out-$tag "$@" >$L/$tag.log 2>&1
    echo "== $tag (world $w; ${envs:-NCCL defaults}) rc=$? $((SECONDS - t0))s"
    grep -aE 'symmetric kernels on|unavailable|rror|wrong elements|tail:|auto within|auto more' \
        $L/$tag.log | grep -av 'NCCL INFO' | head -6
    # The free-running table: every size's plain NCCL, symmetric and auto.
    grep -aA40 'free-running, us per call' $L/$tag.log | grep -aE '^\[0\] +(bytes|[0-9]+ )' |
        awk '{printf "%10s %16s %9s %7s\n", $2, $3, $(NF-2), $(NF-1)}'
}
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c
    nvidia-smi topo -m | head -12
    A="--nccl-symmetric --algos auto,nccl --ks 16,128 --graph-only --no-skew --no-decode --calls 4000 --large-calls 400"
    last=""
    for w in 2 4 8; do
        [ $w -le "$N" ] || continue
        go w${w} $w "" $A
        go w${w}_nomix $w "NCCL_GRAPH_MIXING_SUPPORT=0" $A
        last=$w
    done
    if [ -n "$last" ]; then
        go w${last}_debug $last "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,REG,TUNING" \
            --nccl-symmetric --algos nccl --ks 16 --graph-only --no-skew --no-decode \
            --min-bytes 1024 --max-bytes 1024 --calls 200
        echo "-- NCCL INFO at world $last, 1 KiB (version, windows, symmetric kernels):"
        grep -aiE 'NCCL version|symm|window|register|GRAPH_MIXING|NVLS' $L/w${last}_debug.log |
            sed 's/^.*NCCL INFO/NCCL INFO/' | sort | uniq -c | sort -rn | head -20
    else
        echo "== fewer than 2 GPUs ($N): nothing run"
    fi
    echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $D logs
