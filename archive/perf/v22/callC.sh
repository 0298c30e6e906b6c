#!/bin/bash
# v22 call C (4 GPUs, right after call B on the same machine): the L2
# prefetch's two settings swept, decode at TP4, none / fused /
# fused-prefetch for both models at batch 1, 8 and 64, two turns.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22c && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
{
for turn in 1 2; do
for s in blocks=2,bytes=4194304 blocks=4,bytes=2097152 blocks=4,bytes=4194304 blocks=4,bytes=6291456 \
         blocks=8,bytes=4194304 blocks=8,bytes=8388608 blocks=16,bytes=4194304 blocks=16,bytes=12582912; do
    n=$(echo $s | tr '=,' '__')
    INTRANODE_L2_PREFETCH=$s timeout 60 $D/intranode-run --nproc-per-node 4 --timeout 55 -- \
        $D/intranode-bench decode --batches 1,8,64 --variants none,fused,fused-prefetch --check false \
        --out $D/o >$D/sweep_${turn}_$n.log 2>&1
    echo "== turn $turn $s rc=$? ($SECONDS s)"
    grep -E "^\| llama" $D/o/decode_w4.md | awk -F'|' '$4 ~ /fused/ {printf "%s b%s %s %s;", substr($2,8,3), $3+0, $4 ~ /prefetch/ ? "P" : "F", $9+0}'; echo
done
done
} 2>&1 | tee $OUT/summary_c.txt
tar czf $OUT/sweep_logs.tgz -C $D $(cd $D && ls sweep_*.log)
