#!/bin/bash
# Prepared in v20 on branch v21-copy-tail, not yet run. A/B of
# `prims::grid::copy4`'s tail (four loads in flight, guarded, instead of
# one vector at a time) on 4 GPUs, every result checked by the bench.
# Build both bundles first: `base` from main, `tail` from this branch
# (`cargo xtask device-bundle`), and put base-intranode-bench.gz,
# tail-intranode-bench.gz, intranode-run.gz and tail-intranode-suite.gz
# in bundle/. Then: OUT=DIR bash docs/perf/v21-prep/tail_ab.sh
# Predictions (docs/perf/v20/NOTES.md, "An open cause"):
#   - the all-gather at world 4 on 33 MiB of rings (`scratch=34603008`,
#     2728-vector chunks, 1-2 vectors a thread in the tail): from ~181 /
#     ~645 / ~2475 us at 64 MiB / 256 MiB / 1 GiB toward the 32 KiB
#     chunks' 171 / 615 / 2375;
#   - the all-gather's default (32 KiB chunks, no tail): unchanged;
#   - the push all-reduce at 8-32 MiB (message-sized chunks with tails):
#     a few % at worlds 2 and 4; 64 MiB and up (whole rounds): unchanged;
#   - the barrier two-shot (its gather is `copy4_all`): unchanged or
#     faster.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
D=/tmp/tail && mkdir -p $D/logs $D/base $D/tail
gzip -dc bundle/intranode-run.gz >$D/intranode-run && chmod +x $D/intranode-run
gzip -dc bundle/tail-intranode-suite.gz >$D/intranode-suite && chmod +x $D/intranode-suite
for b in base tail; do gzip -dc bundle/$b-intranode-bench.gz >$D/$b/intranode-bench && chmod +x $D/$b/intranode-bench; done
L=$D/logs
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $6, $7, $8}'; }
bench() { # name, build, world, shape, algos, args...
    local name=$1 b=$2 w=$3 shape=$4 algos=$5
    shift 5
    [ $SECONDS -gt 430 ] && { echo "== $name skipped: $SECONDS s gone"; return; }
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) INTRANODE_PUSH_LAUNCH=$shape timeout 80 \
        $D/intranode-run --failure-wait-secs 5 --timeout 75 --nproc-per-node $w -- \
        $D/$b/intranode-bench bench --ks 16 --graph-only --no-decode --no-skew --large-calls 100 \
        --algos $algos --out /tmp/tail-out "$@" >$L/$name.log 2>&1
    echo "== $name ($b, world $w, '${shape:-default}', $algos) rc=$? ($SECONDS s)"
    grep -E "FAIL|mismatch|rror" $L/$name.log | head -3
    rows $L/$name.log
}
{
nvidia-smi -L
big="--min-bytes 67108864 --max-bytes 1073741824"
for turn in 1 2; do
    for b in base tail; do
        bench ag33_${b}_$turn $b 4 "scratch=34603008" push --collective all-gather $big
    done
done
for b in base tail; do
    bench ag_${b} $b 4 "" push,nccl --collective all-gather $big
    bench rs_${b} $b 4 "" push --collective reduce-scatter $big
    for w in 4 2; do
        bench ar_w${w}_${b}_a $b $w "" push,two-shot --min-bytes 4194304 --max-bytes 67108864
        bench ar_w${w}_${b}_b $b $w "" push,two-shot --min-bytes 8388608 --max-bytes 33554432
    done
done
if [ $SECONDS -lt 440 ]; then
    INTRANODE_REQUIRE_GPUS=4 timeout 75 $D/intranode-run --timeout 70 --nproc-per-node 4 -- \
        $D/intranode-suite check --only-stress --algos push,two-shot >$L/check_stress_tail.log 2>&1
    echo "== check --only-stress --algos push,two-shot (tail) rc=$? ($SECONDS s)"
    grep -v "done, last" $L/check_stress_tail.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-230 | head -3
fi
echo "== call total $SECONDS s"
} 2>&1 | tee $L/summary.txt
tar czf $OUT/tail_ab.tgz -C $D logs
