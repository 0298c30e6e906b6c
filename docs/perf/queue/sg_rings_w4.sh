#!/bin/bash
# Queued (issue 34, items 4 and 5; written in v19, whose device time ran
# out). On a 4-GPU machine, from the repo root with intranode-run.gz and
# intranode-bench.gz (`cargo xtask device-bundle`) in bundle/:
#   OUT=DIR bash docs/perf/queue/sg_rings_w4.sh
# v19 call G (docs/perf/v19/NOTES.md, 4 H100): the push reduce-scatter
# and all-gather in a 76 MiB ring budget (`scratch=79691776`) were
# 3.7-5.4 % faster than on the default 33 MiB from 256 MiB (0.95-0.96x
# NCCL at 1 GiB), but 2.5-4.2 % slower at 64 MiB. Their chunks grow to
# what the message asks there (62 KiB, 2 tiles a block, against 42 KiB
# and 2.9). This script runs both collectives at world 4, 16 MiB-1 GiB,
# in two turns, NCCL in the first shape's runs:
#   - the default (33 MiB);
#   - `scratch=79691776` (76 MiB);
#   - `scratch=79691776,chunk=32768` (76 MiB, chunks at most 32 KiB).
# If the last one keeps the default's 64 MiB and the 76 MiB gain above
# it in both turns, add a rings entry for the reduce-scatter and
# all-gather at 4 ranks next to `ALL_REDUCE_RINGS`
# (`host/src/config/push_shape.rs`). Then retune
# `Crossovers::scatter_gather_max_bytes[4]` (`host/src/algo.rs`, now 256
# MiB) from where it leads NCCL. Writes summary.txt and logs.tgz; about
# 6 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/sg-rings && mkdir -p $D/logs
for f in bundle/intranode-run.gz bundle/intranode-bench.gz; do
    n=$(basename "$f" .gz)
    gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
done
nvidia-smi -L
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $6, $7, $8}'; }
{
for turn in 1 2; do
    for c in all-gather reduce-scatter; do
        for shape in "" "scratch=79691776" "scratch=79691776,chunk=32768"; do
            name=${c}_${turn}_$(echo "${shape:-default}" | tr '=,' '__')
            [ $SECONDS -gt 460 ] && { echo "== $name skipped: $SECONDS s gone"; continue; }
            algos=push
            [ -z "$shape" ] && [ $turn = 1 ] && algos=push,nccl
            INTRANODE_PUSH_LAUNCH=$shape timeout 45 $D/intranode-run --failure-wait-secs 5 --timeout 40 \
                --nproc-per-node 4 -- $D/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew \
                --large-calls 100 --collective $c --algos $algos --min-bytes 16777216 --max-bytes 1073741824 \
                --out /tmp/sg-rings-out >$L/$name.log 2>&1
            echo "== $c turn $turn, '${shape:-default}' rc=$? ($SECONDS s)"
            grep -E "FAIL|mismatch|rror" $L/$name.log | head -2
            rows $L/$name.log
        done
    done
done
echo "== done ($SECONDS s)"
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $D logs
