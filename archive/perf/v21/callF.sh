#!/bin/bash
# v21 call F (2 H200): call B put auto at 1-128 KiB on 2 H200 0.07-0.20 us
# above ../shared/results/2026-11-25/h200x2/bench.log (main at 3c13f91,
# another machine, the full sweep). Same machine, same mode, both trees
# alternating: `old` is 3c13f91's bench, `new` this tree's (9ee4dde).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/cf && mkdir -p $D/old $D/new $D/logs
gzip -dc bundle/intranode-run.gz >$D/intranode-run && chmod +x $D/intranode-run
for b in old new; do gzip -dc bundle/$b-intranode-bench.gz >$D/$b/intranode-bench && chmod +x $D/$b/intranode-bench; done
{
for turn in 1 2; do
    for b in old new; do
        timeout 40 $D/intranode-run --failure-wait-secs 5 --timeout 35 --nproc-per-node 2 -- \
            $D/$b/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew \
            --algos auto,nccl --min-bytes 1024 --max-bytes 1048576 --out /tmp/cf-out >$D/logs/${b}_$turn.log 2>&1
        echo "== $b turn $turn rc=$? ($SECONDS s)"
        grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' $D/logs/${b}_$turn.log | awk '{print $2, $3, $4, $(NF-2), $(NF-1)}'
    done
done
} 2>&1 | tee $D/logs/summary.txt
tar czf $OUT/cf.tgz -C $D logs
