#!/bin/bash
# Queued in v24 (docs/perf/v24/NOTES.md) for a machine of 2, 4 or 8 GPUs
# (H100 or H200). From the repo root with intranode-run.gz,
# intranode-bench.gz and intranode-suite.gz (`cargo xtask device-bundle`)
# in bundle/:
#   OUT=DIR bash docs/perf/queue/v24_hog_and_sharing.sh
# 1. the hog stage (every form, eager and in a graph, each call started
#    while a kernel on another stream holds the SMs) at every world the
#    GPUs allow, a GPU each;
# 2. two ranks per GPU under MPS (intranode-run --mps; residency cap
#    sms/2, no launch overlap), graph, back-to-back, free-running and hog;
# 3. the all-reduce sweep 1 KiB-1 GiB (auto and NCCL) and the decode
#    table at the largest world: v24 left the kernels byte-identical and
#    changes nothing for a GPU each (no cap, overlap on), so these must
#    match v22/v23's figures within noise; a gap is a finding.
# Writes summary.txt and logs.tgz; about 8 minutes at 4 GPUs.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v24-hog && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
N=$(nvidia-smi -L | grep -c '^GPU ')
L=$D/logs
check() { # tag world gpus mps? args...
    local tag=$1 w=$2 g=$3 m=$4
    shift 4
    [ $SECONDS -gt 460 ] && { echo "== $tag skipped: $SECONDS s gone"; return; }
    timeout 110 $D/intranode-run $m --failure-wait-secs 5 --timeout 100 --nproc-per-node $w --gpus $g -- \
        $D/intranode-suite check "$@" >$L/$tag.log 2>&1
    echo "== $tag rc=$? ($SECONDS s)"
    grep -hE "check rank 0|got |never came|ran out|rror" $L/$tag.log | head -3 | cut -c1-300
}
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for w in 2 4 8; do
    [ $w -le $N ] || continue
    check hog_w$w $w $(seq -s, 0 $((w - 1))) "" --only-hog --hog-rounds 20
done
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1
G2=$(for i in $(seq 0 $((N - 1))); do printf "%d,%d," $i $i; done | sed 's/,$//')
for st in graph stress free hog; do
    check mps2x${N}_$st $((2 * N)) $G2 --mps --only-$st --stress-calls 300 --graph-replays 100 --free-replays 20 --hog-rounds 10
done
unset INTRANODE_ALLOW_OVERLAPPING_DEVICES
timeout 120 $D/intranode-run --failure-wait-secs 5 --timeout 115 --nproc-per-node $N -- \
    $D/intranode-bench bench --ks 16 --graph-only --no-decode --large-calls 100 \
    --algos auto,nccl --min-bytes 1024 --max-bytes 1073741824 --out $D/out-sweep >$L/sweep_w$N.log 2>&1
echo "== sweep, world $N rc=$? ($SECONDS s)"
grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+|FAIL|mismatch' $L/sweep_w$N.log | head -40
timeout 100 $D/intranode-run --failure-wait-secs 5 --timeout 95 --nproc-per-node $N -- \
    $D/intranode-bench decode >$L/decode_w$N.log 2>&1
echo "== decode, world $N rc=$? ($SECONDS s)"
grep -E "^\[0\]" $L/decode_w$N.log | tail -20
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $D logs
