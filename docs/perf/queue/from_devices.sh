#!/bin/bash
# The cudarc-style examples on a machine of 2, 4 or 8 GPUs (H100 or H200);
# so far exact at 2 and 4 ranks on one H200 only (CHANGELOG.md):
# 1. 05_from_devices (one process, a thread per GPU, in-place bf16
#    all-reduces captured in a graph, every element checked, GPU time per
#    all-reduce from events around each replay) on 2, 4 and 8 GPUs as
#    there are, with intranode::nccl::Comm and with cudarc::nccl::Comm
#    (NCCL) in the same call, at decode sizes (hidden 4096, 8192, 16384);
#    one process on several GPUs has not run on any machine yet;
# 2. 04_from_rank (a process per rank from an Id rank 0 ships: the sweep
#    of sizes, the layer loop of out-of-place bf16 all-reduces into fresh
#    outputs, then that step captured in a graph, GPU time per
#    all-reduce) on 2, 4 and 8 GPUs, intranode and cudarc's NCCL.
# Usage (lib.sh, bundle: intranode-run, 04_from_rank, 05_from_devices):
#   OUT=DIR bash docs/perf/queue/from_devices.sh
# Writes summary.txt and logs.tgz; about 4 minutes at 8 GPUs.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
queue_start intranode-run 04_from_rank 05_from_devices
go() { # tag cmd...
    local tag=$1
    shift
    past 480 "$tag" && return
    local t0=$SECONDS
    timeout 120 "$@" >$L/$tag.log 2>&1
    echo "== $tag rc=$? $((SECONDS - t0))s"
    grep -hE 'median|passed|rror|got ' $L/$tag.log | head -12
}
{
    nvidia-smi -L
    for w in 2 4 8; do
        [ $w -le $N ] || continue
        for h in 4096 8192 16384; do
            for b in intranode cudarc; do
                go fd_w${w}_h${h}_$b $D/05_from_devices --gpus $(first_gpus $w) --hidden $h --layers 8 \
                    --replays 200 --eager 3 --backend $b
            done
        done
    done
    for w in 2 4 8; do
        [ $w -le $N ] || continue
        for b in intranode cudarc; do
            go fr_w${w}_$b $D/04_from_rank --gpus $(first_gpus $w) --steps 5 --replays 200 --backend $b
        done
    done
} 2>&1 | tee $OUT/summary.txt
queue_logs
