#!/bin/bash
# v15 closing call on 4 GPUs, from the final tree (bundle-v18s/):
#   1. the suite's all-reduce + residual + RMSNorm check (auto decides
#      the path: since 4499862 the fused kernel at 4 ranks to 1 MiB where
#      the plain all-reduce is the Lamport two-shot);
#   2. auto at world 4, 128 KiB-2 MiB, NCCL beside (512 KiB now the
#      Lamport two-shot: expected ~7.3 us, was 7.8);
#   3. the decode stack at TP4 (none, NCCL, ours, fused; llama3-8b and
#      -70b, batch 1-64).
# Usage, from the repo root:  OUT=DIR bash archive/perf/v15/final2.sh
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v18
mkdir -p $D
for f in bundle-v18s/*.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
R="$D/intranode-run --nproc-per-node 4 --timeout"
echo "== 1. check --only-norm"
timeout 70 $R 60 -- $D/intranode-suite check --only-norm >$OUT/check_norm_w4.log 2>&1
echo "rc=$?"
grep -E "^\[0\] check|FAIL|rror|wrong" $OUT/check_norm_w4.log | cut -c1-250 | head -3
echo "== 2. auto at world 4"
timeout 50 $R 40 -- $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --calls 3000 \
    --algos auto,nccl --min-bytes 131072 --max-bytes 2097152 --out /tmp/auto4 >$OUT/auto_w4.log 2>&1
echo "rc=$?"
grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' $OUT/auto_w4.log | awk '{print $2, $3, $4, $6, $7}'
echo "== 3. decode at TP4"
timeout 200 $R 190 -- $D/intranode-bench decode --variants none,nccl,ours,fused --out $OUT/decode \
    >$OUT/decode_w4.log 2>&1
echo "rc=$?"
grep -E "us/layer" $OUT/decode_w4.log | grep "^\[0\]" | cut -c1-160
echo "== done ($SECONDS s)"
