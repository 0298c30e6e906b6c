#!/bin/bash
# Device run of branch `kfam` (issue 27 items 1-2: one table of kernel
# families, typed kernel keys, one decision and one launch path), on 2
# GPUs, under 8 minutes. The kernels' PTX and cubin are byte-identical to
# main's; what changed is the host's path to the launch, so this runs the
# host paths: every all-reduce form, the broadcast, reduce-scatter /
# all-gather, the fused and unfused norm, the barrier, bad input (the
# `_with` rule: an explicit algorithm that cannot run is an error), and a
# short free-running sweep for the launch cost (compare with
# /work/shared/results/2026-11-25, same card kind).
#   1. intranode-suite check (default counts: every algorithm incl. push,
#      every NcclType, symmetric buffers, norm);
#   2. intranode-suite bad-input;
#   3. example 02_cuda_graph (graphs of our collectives);
#   4. bench, free-running, 4 KiB - 1 MiB, lamport / one-shot / auto / nccl.
# Usage, from the repo root: OUT=DIR archive/perf/v12/kfam.sh BUNDLE_DIR
# BUNDLE_DIR: gzipped stripped intranode-run, intranode-suite,
# intranode-bench, 02_cuda_graph.
# A step whose bound would pass 450 s from the start is skipped (and says so).
set -u
: "${OUT:?set OUT}"
SRC=${1:?usage: kfam.sh BUNDLE_DIR}
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000
B=/tmp/kfam-bin; mkdir -p $B $OUT/l
for f in $SRC/*; do n=$(basename $f); case $n in
  *.gz) gunzip -c $f > $B/${n%.gz}; chmod +x $B/${n%.gz} ;;
  *) cp $f $B/ ;; esac; done
T0=$SECONDS; el() { echo $((SECONDS - T0)); }
step() { local l=$1 b=$2; shift 2
  if [ $(( $(el) + b )) -gt 450 ]; then echo "== $l SKIPPED at $(el) s"; return; fi
  local s=$SECONDS; timeout $b "$@" > $OUT/l/$l.log 2>&1; echo "== $l rc=$? $((SECONDS-s)) s (at $(el) s)"; }
nvidia-smi -L
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
export INTRANODE_REQUIRE_GPUS=2 CUDA_CACHE_PATH=/tmp/cuda-cache

step check 210 $R 200 -- $B/intranode-suite check
grep -v "done, last" $OUT/l/check.log | grep -E "ok|rror|FAIL|wrong|panick" | tail -14
step bad_input 60 $R 55 -- $B/intranode-suite bad-input
grep -E "ok|rror|FAIL|expected|panick" $OUT/l/bad_input.log | tail -14
step graph_02 60 $R 55 -- $B/02_cuda_graph --replays 20
grep -E "exact|rror|panick" $OUT/l/graph_02.log | head -4
step bench 120 $R 115 -- $B/intranode-bench bench --no-decode --no-skew --ks 1 --min-bytes 4096 --max-bytes 1048576 --algos lamport,one-shot,auto,nccl --out $OUT/bench
grep -E "bytes +algo|^\[0\] +[0-9]+ |wrong|rror" $OUT/l/bench.log | tail -24
echo "== done at $(el) s"
