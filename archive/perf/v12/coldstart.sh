#!/bin/bash
# Issue 26 device run (branch coldstart): first start with the embedded
# cubin, per-phase set-up times, create/drop cycles, and the suite's
# correctness check on the cubin.
#
# usage (from the repo root, on 2 GPUs; 1 GPU: two ranks share it):
#   OUT=/some/dir archive/perf/v12/coldstart.sh BUNDLE_DIR
# BUNDLE_DIR holds gzipped stripped binaries: intranode-run,
# intranode-suite, 02_cuda_graph, 01_data_parallel. Writes only under $OUT.
# Set PTX_BASELINE=0 to skip the last step (the PTX JIT, about a minute).
set -u
export NCCL_NVLS_ENABLE=0
BUNDLE=${1:?usage: coldstart.sh BUNDLE_DIR}
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
B=$(mktemp -d /tmp/coldstart-bin.XXXX)
for f in "$BUNDLE"/*.gz; do
  n=$(basename "$f" .gz); gunzip -c "$f" > "$B/$n"; chmod +x "$B/$n"
done
ls -la "$B" | tee "$OUT/binaries.txt"
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$NGPU" -ge 2 ]; then
  RUN="$B/intranode-run --nproc-per-node 2 --timeout 160 --failure-wait-secs 15 --"
  export INTRANODE_REQUIRE_GPUS=2
else
  RUN="$B/intranode-run --nproc-per-node 2 --gpus 0,0 --timeout 160 --failure-wait-secs 15 --"
  export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 INTRANODE_TEST_INTRA_NODE_COMM=1
fi
# The whole run stays under 8 minutes: a step whose bound would pass
# START + 470 s is skipped (and says so).
START=$(date +%s)
# timed LABEL BOUND_S CMD...: wall time of CMD in ms (killed after
# BOUND_S), its exit status, the lines that matter.
timed() {
  local label=$1 bound=$2; shift 2
  if [ $(( $(date +%s) + bound )) -gt $(( START + 470 )) ]; then
    echo "== $label: SKIPPED (would pass the 8-minute budget)"; return
  fi
  local start=$(date +%s%N)
  set -- timeout "$bound" "$@"
  "$@" > "$OUT/$label.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "== $label: wall ${ms} ms, rc $rc"
  grep -E "set-up:|error|FAIL|PASS|passed|wrong" "$OUT/$label.log" | head -12
  tail -2 "$OUT/$label.log"
}

CACHE=$(mktemp -d /tmp/coldstart-cache.XXXX)
echo "## 1. first 02_cuda_graph run, empty driver cache ($CACHE)"
timed cold_02 90 env CUDA_CACHE_PATH="$CACHE" INTRANODE_TIMING=1 $RUN "$B/02_cuda_graph" --replays 10
echo "   driver cache after it: $(du -sk "$CACHE" | cut -f1) KiB (a JIT of the production PTX leaves about 29 MB)"
echo "## 2. the same with CUDA_CACHE_DISABLE=1"
timed nocache_02 90 env CUDA_CACHE_DISABLE=1 INTRANODE_TIMING=1 $RUN "$B/02_cuda_graph" --replays 10
echo "## 3. warm: again with the cache of step 1"
timed warm_02 60 env CUDA_CACHE_PATH="$CACHE" INTRANODE_TIMING=1 $RUN "$B/02_cuda_graph" --replays 10
echo "## 4. first 01_data_parallel run, cache disabled"
timed nocache_01 60 env CUDA_CACHE_DISABLE=1 INTRANODE_TIMING=1 $RUN "$B/01_data_parallel"
echo "## 5. recreate: 5 cycles of each part alone, then 50 of Communicator::new + drop"
timed recreate 150 env CUDA_CACHE_PATH="$CACHE" $RUN "$B/intranode-suite" recreate --cycles 50 --pieces 5
grep "recreate rank" "$OUT/recreate.log"
echo "## 6. suite check on the cubin (INTRANODE_KERNEL_IMAGE=cubin), reduced counts"
timed check_cubin 120 env CUDA_CACHE_DISABLE=1 INTRANODE_KERNEL_IMAGE=cubin $RUN "$B/intranode-suite" check --stress-calls 100 --graph-replays 5 --free-replays 1
if [ "${PTX_BASELINE:-1}" = 1 ]; then
  echo "## 7. baseline in the same binary: INTRANODE_KERNEL_IMAGE=ptx, empty cache (the driver JIT compiles the PTX)"
  CACHE2=$(mktemp -d /tmp/coldstart-cache.XXXX)
  timed ptx_cold_02 100 env CUDA_CACHE_PATH="$CACHE2" INTRANODE_KERNEL_IMAGE=ptx INTRANODE_TIMING=1 $RUN "$B/02_cuda_graph" --replays 10
  echo "   driver cache after it: $(du -sk "$CACHE2" | cut -f1) KiB"
  rm -rf "$CACHE2"
fi
rm -rf "$CACHE" "$B"
