#!/bin/bash
# After the layout merge (issue 27's host re-layout on top of the v12
# work): the reduced suite, the cold example, a few re-create cycles and
# the TCPStore protocol test (libuv server), on 2 GPUs, about 3 minutes.
# Usage, from the repo root: OUT=DIR archive/perf/v12/post.sh BUNDLE_DIR
set -u
: "${OUT:?set OUT}"
SRC=${1:?usage: post.sh BUNDLE_DIR}
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=2 INTRANODE_BARRIER_TIMEOUT_MS=5000
B=/tmp/post-bin; mkdir -p $B
for f in $SRC/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
nvidia-smi -L
echo "== 02_cuda_graph, empty driver cache"
CUDA_CACHE_PATH=$(mktemp -d) INTRANODE_TIMING=1 timeout 60 $R 55 -- $B/02_cuda_graph --replays 10 2>&1 | grep -E "set-up|exact|rror" | head -4
echo "== check, reduced counts"
timeout 200 $R 190 -- $B/intranode-suite check --stress-calls 300 --graph-replays 5 --free-replays 1 2>&1 | tee $OUT/check.log | grep -v "done, last" | grep -E "ok|rror|FAIL|wrong|panick" | tail -12
echo "== recreate, 20 cycles"
timeout 60 $R 55 -- $B/intranode-suite recreate --cycles 20 2>&1 | grep -E "cycles of|PASS|FAIL|rror" | head -6
echo "== TorchStore against torch's default (libuv) TCPStore"
INTRANODE_REQUIRE_TORCH=1 timeout 60 $B/torch_tcpstore --nocapture --test-threads=1 2>&1 | tail -8
echo "== done"
