#!/bin/bash
# v22 call E (4 GPUs): does the release in `sync::finish_call` (an
# `atom.add.acq_rel.gpu`, which may wait for the block's NVLink stores to
# be acknowledged) cost the Lamport forms their unexplained ~1.5 us?
# A/B: main's bench against a build whose `finish_call` increments with
# `atom.add.relaxed.gpu` (an experiment, not on main), alternating, two
# turns: the Lamport forms and NCCL at 1 KiB-4 MiB, world 4, and the
# decode stack (llama3-8b, none and fused-prefetch).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/v22e && mkdir -p $D
for f in bundle/intranode-run.gz bundle/intranode-bench.gz bundle/intranode-bench-relaxed.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
{
for turn in 1 2; do
for b in intranode-bench intranode-bench-relaxed; do
    timeout 100 $D/intranode-run --nproc-per-node 4 --timeout 95 -- $D/$b bench --ks 16 --graph-only \
        --no-decode --no-skew --algos lamport,lamport-two-shot,nccl --min-bytes 1024 --max-bytes 4194304 \
        --out $D/o >$D/lam_${turn}_$b.log 2>&1
    echo "== turn $turn $b rc=$? ($SECONDS s)"
    grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $D/lam_${turn}_$b.log | awk '$3 != "nccl" || $2 ~ /^(1024|262144|1048576)$/ {printf "%s %s %s; ", $2, substr($3,1,9), $(NF-2)}'; echo
    timeout 60 $D/intranode-run --nproc-per-node 4 --timeout 55 -- $D/$b decode --models llama3-8b \
        --batches 1,8,64 --variants none,fused-prefetch --check false --out $D/d >$D/dec_${turn}_$b.log 2>&1
    echo "== decode rc=$? ($SECONDS s)"
    grep -E "^\| llama" $D/d/decode_w4.md | awk -F'|' '{printf "b%s %s %s; ", $3+0, $4, $6+0}'; echo
done
done
} 2>&1 | tee $OUT/summary_e.txt
tar czf $OUT/logs_e.tgz -C $D $(cd $D && ls *.log)
