#!/bin/bash
# 1 H200, branch h-bench at 839f166 (bench --nccl-symmetric): world 1,
# plain NCCL, auto and NCCL's symmetric-kernel row in the same run, with
# and without NCCL_GRAPH_MIXING_SUPPORT=0, under cudarc's event tracking,
# then f64 (reported unavailable).
# From the repo root with intranode-run.gz and intranode-bench.gz in
# bundle3/: OUT=DIR bash bundle3/run.sh
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=/tmp/b3 && mkdir -p $D/logs
for f in bundle3/intranode-run.gz bundle3/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
L=$D/logs
go() { # tag, "VAR=value ..." (or ""), bench args...
    local tag=$1 envs=$2
    shift 2
    [ $SECONDS -gt 200 ] && { echo "== $tag skipped: $SECONDS s gone"; return; }
    local t0=$SECONDS
    env $envs timeout 100 $D/intranode-run --failure-wait-secs 5 --timeout 95 --nproc-per-node 1 -- \
        $D/intranode-bench bench --out $D/out-$tag "$@" >$L/$tag.log 2>&1
    echo "== $tag ($envs) rc=$? $((SECONDS - t0))s"
    grep -aE 'nccl-sym|unavailable|rror|wrong elements|tail:|auto within|auto more|results:' $L/$tag.log | grep -avE 'NCCL INFO|done,' | head -8
    grep -aA16 'as nccl-tests prints it' $L/$tag.log | head -40
}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    A="--nccl-symmetric --algos nccl,auto --ks 1,16,128 --no-decode --max-bytes 4194304 --calls 4000 --large-calls 400"
    go mix "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,REG" $A
    echo "-- NCCL INFO lines of the first run (version, registration, symmetric):"
    grep -aiE 'NCCL version|symmetric|window|cumem|NVLS|GRAPH_MIXING' $L/mix.log | sed 's/^.*NCCL INFO/NCCL INFO/' | sort | uniq -c | head -20
    go nomix "NCCL_GRAPH_MIXING_SUPPORT=0" $A
    go tracked "" --cudarc-defaults --nccl-symmetric --algos nccl --ks 16 --graph-only --no-skew --no-decode --max-bytes 65536 --calls 1000
    go f64 "" --nccl-symmetric --algos nccl --dtype f64 --ks 16 --graph-only --no-skew --no-decode --max-bytes 4096 --calls 200
    echo "-- free-running tables:"
    for t in mix nomix; do echo "[$t]"; grep -aA32 'free-running, us per call' $L/$t.log | grep -aE 'bytes|nccl|auto' | head -32; done
    echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
for t in mix nomix tracked f64; do cp -r $D/out-$t $L/ 2>/dev/null; done
tar czf $OUT/logs.tgz -C $D logs
