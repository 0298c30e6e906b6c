#!/bin/bash
# v22 call G (4 H200, the first 4-H200 machine lent): the final tree.
# hop; auto / NCCL 1 KiB-256 MiB at world 4 and 1 KiB-64 MiB at world 2
# (GPUs 0,1); decode at TP4 (every variant); check norm and stress at 4;
# `recreate` (leaks) at 4 if time is left.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22g && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-suite.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $1 | awk '{printf "%s %s %s %s; ", $2, substr($3,1,9), $(NF-2), $(NF-1)}'; echo; }
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1
timeout 60 $D/intranode-run --timeout 55 --nproc-per-node 4 -- $D/intranode-bench hop >$D/hop_w4.log 2>&1
echo "== hop rc=$? ($SECONDS s)"; grep -E "0<->|launch floor" $D/hop_w4.log | head -5
timeout 150 $D/intranode-run --nproc-per-node 4 --timeout 145 -- $D/intranode-bench bench --ks 16 --graph-only \
    --no-decode --no-skew --algos auto,nccl --min-bytes 1024 --max-bytes 268435456 --large-calls 50 \
    --out $D/o4 >$D/auto_w4.log 2>&1
echo "== auto, world 4 rc=$? ($SECONDS s)"; rows $D/auto_w4.log
timeout 60 $D/intranode-run --nproc-per-node 4 --timeout 55 -- $D/intranode-bench decode --batches 1,8,64 \
    --variants none,nccl,ours,fused,fused-prefetch --out $D/d >$D/decode_w4.log 2>&1
echo "== decode, TP4 rc=$? ($SECONDS s)"
grep -E "^\| llama" $D/d/decode_w4.md | awk -F'|' '{printf "%s b%s %s %s %s; ", substr($2,8,3), $3+0, $4, $6+0, $9+0}'; echo
CUDA_VISIBLE_DEVICES=0,1 timeout 60 $D/intranode-run --nproc-per-node 2 --timeout 55 -- $D/intranode-bench bench \
    --ks 16 --graph-only --no-decode --no-skew --algos auto,nccl --min-bytes 1024 --max-bytes 67108864 \
    --out $D/o2 >$D/auto_w2.log 2>&1
echo "== auto, world 2 rc=$? ($SECONDS s)"; rows $D/auto_w2.log
export INTRANODE_REQUIRE_GPUS=4
for part in norm "stress --stress-calls 1000"; do
    set -- $part; p=$1
    timeout 90 $D/intranode-run --timeout 85 --nproc-per-node 4 -- $D/intranode-suite check --only-$* >$D/check_$p.log 2>&1
    echo "== check --only-$p rc=$? ($SECONDS s)"; grep -E "check rank 0|FAIL|rror" $D/check_$p.log | head -2 | cut -c1-220
done
if [ $SECONDS -lt 200 ]; then
    timeout 90 $D/intranode-run --timeout 85 --nproc-per-node 4 -- $D/intranode-suite recreate --cycles 10 \
        --pieces 3 --stream-cycles 5 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$D/recreate.log 2>&1
    echo "== recreate rc=$? ($SECONDS s)"
    grep -E "^\[0\] recreate|PASS|FAIL" $D/recreate.log | grep -v "stream cycle" | cut -c1-230 | head -6
fi
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary_g.txt
tar czf $OUT/logs_g.tgz -C $D $(cd $D && ls *.log)
