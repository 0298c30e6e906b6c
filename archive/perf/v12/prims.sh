#!/bin/bash
# Device run of the kernels-gpu re-layout (branch prims, issue 27 item 3,
# device half): the kernels now stand on `prims` (one strided copy, one
# Lamport set-up, one row-norm primitive, typed barrier peers); the PTX's
# entry list is main's and no kernel takes more registers
# (docs/dev/kernel-modules.md). This run checks that results and speed
# are unchanged, on 2 GPUs, one call under 8 minutes:
#   1. the correctness suite (`intranode-suite check`, default counts:
#      every algorithm incl. push, Lamport RS/AG, broadcast, fused and
#      unfused norm, every NcclType, symmetric buffers);
#   2. small messages, graph-16, this branch then main's binary in the
#      same call (A/B on the same cards): lamport, lamport-two-shot,
#      one-shot, two-shot, nccl;
#   3. large messages (16-256 MiB): push, two-shot, nccl, both binaries;
#   4. the decode step, fused against unfused norm, both binaries.
# Usage, from the repo root: OUT=DIR archive/perf/v12/prims.sh BUNDLE_DIR
# BUNDLE_DIR: gzipped stripped intranode-run, intranode-suite,
# intranode-bench (this branch) and, for the A/B steps,
# intranode-bench-main (main at 04b694b); without it those steps run this
# branch alone (compare with ../shared/results/2026-11-25 then).
# A step whose bound would pass 450 s from the start is skipped (and says so).
set -u
: "${OUT:?set OUT}"
SRC=${1:?usage: prims.sh BUNDLE_DIR}
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
B=/tmp/prims-bin; mkdir -p $B $OUT/l
for f in $SRC/*; do n=$(basename $f); case $n in
  *.gz) gunzip -c $f > $B/${n%.gz}; chmod +x $B/${n%.gz} ;;
  *) cp $f $B/ ;; esac; done
T0=$SECONDS; el() { echo $((SECONDS - T0)); }
step() { local l=$1 b=$2; shift 2
  if [ $(( $(el) + b )) -gt 450 ]; then echo "== $l SKIPPED at $(el) s"; return; fi
  local s=$SECONDS; timeout $b "$@" > $OUT/l/$l.log 2>&1; echo "== $l rc=$? $((SECONDS-s)) s (at $(el) s)"; }
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
export INTRANODE_REQUIRE_GPUS=2 CUDA_CACHE_PATH=/tmp/cuda-cache
BINS="prims"; [ -x $B/intranode-bench-main ] && BINS="prims main"
bench_of() { if [ $1 = main ]; then echo $B/intranode-bench-main; else echo $B/intranode-bench; fi; }

step check 170 $R 160 -- $B/intranode-suite check
grep -v "done, last" $OUT/l/check.log | grep -E "ok|rror|FAIL|wrong|panick" | tail -14

BS="bench --no-decode --no-skew --ks 16 --graph-only --calls 2000 --max-bytes 4194304"
for v in $BINS; do
  step small_$v 80 $R 75 -- $(bench_of $v) $BS --algos lamport,lamport-two-shot,one-shot,two-shot,nccl --out $OUT/small_$v
  echo "-- small, $v"; grep -E "bytes +algo|^\[0\] +[0-9]+ |wrong|rror" $OUT/l/small_$v.log | tail -60
done
BL="bench --no-decode --no-skew --ks 16 --graph-only --min-bytes 16777216 --max-bytes 268435456 --large-calls 100"
for v in $BINS; do
  step large_$v 50 $R 45 -- $(bench_of $v) $BL --algos push,two-shot,nccl --out $OUT/large_$v
  echo "-- large, $v"; grep -E "bytes +algo|^\[0\] +[0-9]+ |wrong|rror" $OUT/l/large_$v.log | tail -14
done
for v in $BINS; do
  step decode_$v 40 $R 35 -- $(bench_of $v) decode --models llama3-8b --batches 1,8,32 --variants nccl,ours,fused --out $OUT/decode_$v
  echo "-- decode, $v"; grep -vE "^\s*$" $OUT/l/decode_$v.log | tail -14
done

cd $OUT && tar czf prims-logs.tgz l small_* large_* decode_* 2>/dev/null
rm -rf $OUT/l $OUT/small_* $OUT/large_* $OUT/decode_*
echo "== done at $(el) s"
