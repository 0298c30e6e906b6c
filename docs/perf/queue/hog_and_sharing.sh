#!/bin/bash
# Ranks that share a GPU, and calls started while another kernel holds
# the SMs, on a machine of 2, 4 or 8 GPUs (H100 or H200); so far run on one
# H200 only (CHANGELOG.md):
# 1. the hog stage (every form, eager and in a graph, each call started
#    while a kernel on another stream holds the SMs) at every world the
#    GPUs allow, a GPU each;
# 2. two ranks per GPU under MPS (intranode-run --mps; residency cap
#    sms/2, no launch overlap), graph, back-to-back, free-running and hog;
# 3. the all-reduce sweep 1 KiB-1 GiB (auto and NCCL) and the decode
#    table at the largest world: the kernels a GPU each runs are those of
#    the last multi-GPU figures (no cap, overlap on), so these must match
#    them within noise; a gap is a finding.
# Usage (lib.sh, bundle: intranode-run, intranode-bench, intranode-suite):
#   OUT=DIR bash docs/perf/queue/hog_and_sharing.sh
# Writes summary.txt and logs.tgz; about 8 minutes at 4 GPUs.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
queue_start intranode-run intranode-bench intranode-suite
check() { # tag world gpus mps? args...
    local tag=$1 w=$2 g=$3 m=$4
    shift 4
    past 460 "$tag" && return
    ranks 110 $w $m --gpus $g -- $D/intranode-suite check "$@" >$L/$tag.log 2>&1
    echo "== $tag rc=$? ($SECONDS s)"
    grep -hE "check rank 0|got |never came|ran out|rror" $L/$tag.log | head -3 | cut -c1-300
}
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for w in 2 4 8; do
    [ $w -le $N ] || continue
    check hog_w$w $w $(first_gpus $w) "" --only-hog --hog-rounds 20
done
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1
G2=$(for i in $(seq 0 $((N - 1))); do printf "%d,%d," $i $i; done | sed 's/,$//')
for st in graph stress free hog; do
    check mps2x${N}_$st $((2 * N)) $G2 --mps --only-$st --stress-calls 300 --graph-replays 100 --free-replays 20 --hog-rounds 10
done
unset INTRANODE_ALLOW_OVERLAPPING_DEVICES
ranks 120 $N -- $D/intranode-bench bench --ks 16 --graph-only --no-decode --large-calls 100 \
    --algos auto,nccl --min-bytes 1024 --max-bytes 1073741824 --out $D/out-sweep >$L/sweep_w$N.log 2>&1
echo "== sweep, world $N rc=$? ($SECONDS s)"
grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+|FAIL|mismatch' $L/sweep_w$N.log | head -40
ranks 100 $N -- $D/intranode-bench decode >$L/decode_w$N.log 2>&1
echo "== decode, world $N rc=$? ($SECONDS s)"
grep -E "^\[0\]" $L/decode_w$N.log | tail -20
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
queue_logs
