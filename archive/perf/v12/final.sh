#!/bin/bash
# The closing device run of the v12 work (issues 26, 28, 29, 30 merged),
# on 2 GPUs, one call under 10 minutes:
#   1. cold start: first 02_cuda_graph with an empty driver cache and with
#      CUDA_CACHE_DISABLE=1 (per-phase set-up times), then 50 create/drop
#      cycles (`intranode-suite recreate`);
#   2. the correctness suite (`intranode-suite check`, default counts:
#      every algorithm incl. push, every NcclType, symmetric buffers);
#   3. large messages: ours (push, Lamport two-shot, auto) against NCCL, and
#      PyTorch's symm_mem kernels (peers_graph.py) in the same call;
#   4. torchrun: the TCPStore protocol test against a real TCPStore and a
#      Rust rank rendezvousing under torchrun; intranode-run with
#      torchrun's spellings;
#   5. the free-running small-message sweep (speed against 2026-11-25);
#   6. an integer all-reduce through the bench (--dtype i32).
# Usage, from the repo root: OUT=DIR archive/perf/v12/final.sh BUNDLE_DIR
# BUNDLE_DIR: gzipped stripped intranode-run, intranode-suite,
# intranode-bench, 02_cuda_graph, torch_tcpstore, and peers_graph.py.
# A step whose bound would pass 570 s from the start is skipped (and says so).
set -u
: "${OUT:?set OUT}"
SRC=${1:?usage: final.sh BUNDLE_DIR}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 INTRANODE_BARRIER_TIMEOUT_MS=5000
B=/tmp/final-bin; mkdir -p $B $OUT/l
for f in $SRC/*; do n=$(basename $f); case $n in
  *.gz) gunzip -c $f > $B/${n%.gz}; chmod +x $B/${n%.gz} ;;
  *) cp $f $B/ ;; esac; done
T0=$SECONDS; el() { echo $((SECONDS - T0)); }
step() { local l=$1 b=$2; shift 2
  if [ $(( $(el) + b )) -gt 570 ]; then echo "== $l SKIPPED at $(el) s"; return; fi
  local s=$SECONDS; timeout $b "$@" > $OUT/l/$l.log 2>&1; echo "== $l rc=$? $((SECONDS-s)) s (at $(el) s)"; }
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
export INTRANODE_REQUIRE_GPUS=2

C1=$(mktemp -d /tmp/cc.XXXX)
step cold_02 60 env CUDA_CACHE_PATH=$C1 INTRANODE_TIMING=1 $R 55 -- $B/02_cuda_graph --replays 10
grep -E "set-up|exact|rror" $OUT/l/cold_02.log | head -4; echo "driver cache after it: $(du -sk $C1 | cut -f1) KiB"
step nocache_02 60 env CUDA_CACHE_DISABLE=1 INTRANODE_TIMING=1 $R 55 -- $B/02_cuda_graph --replays 10
grep -E "set-up|rror" $OUT/l/nocache_02.log | head -2
export CUDA_CACHE_PATH=/tmp/cuda-cache
step recreate 100 $R 95 -- $B/intranode-suite recreate --cycles 50 --pieces 3
grep -E "recreate rank 0|PASS|FAIL|rror" $OUT/l/recreate.log | head -8

step check 210 $R 200 -- $B/intranode-suite check
grep -v "done, last" $OUT/l/check.log | grep -E "ok|rror|FAIL|wrong|panick" | tail -12

BL="bench --no-decode --no-skew --ks 16 --graph-only --min-bytes 16777216 --max-bytes 1073741824 --large-calls 300"
step large 120 $R 115 -- $B/intranode-bench $BL --algos push,lamport-two-shot,nccl,auto --out $OUT/large
grep -E "bytes +algo|^\[0\] +[0-9]+ |wrong|rror" $OUT/l/large.log | tail -18
step peers 120 env MODE=plain SIZES=16777216,67108864,268435456,1073741824 python3 -m torch.distributed.run --nproc_per_node=2 $B/peers_graph.py
tail -n 8 $OUT/l/peers.log

step torch_protocol 60 env INTRANODE_REQUIRE_TORCH=1 $B/torch_tcpstore --nocapture --test-threads=1
grep -E "passed|round-trip|FAIL|panick" $OUT/l/torch_protocol.log | tail -4
step torchrun_02 70 env RUST_LOG=intranode_store=info,warn INTRANODE_REQUIRE_GPUS=1 python3 -m torch.distributed.run --standalone --nproc_per_node 2 --no-python $B/02_cuda_graph --replays 20
grep -E "protocol|exact|rror" $OUT/l/torchrun_02.log | head -6
step spellings 40 env RUST_LOG=intranode_store=info,warn $B/intranode-run --nproc_per_node gpu --standalone --timeout 35 $B/02_cuda_graph --replays 10
grep -E "protocol|exact|rror" $OUT/l/spellings.log | head -4

step small 120 $R 115 -- $B/intranode-bench bench --no-decode --no-skew --ks 16 --graph-only --calls 3000 --max-bytes 4194304 --algos lamport,lamport-two-shot,one-shot,two-shot,nccl,auto --out $OUT/small
grep -E "bytes +algo|^\[0\] +[0-9]+ |wrong|rror|within" $OUT/l/small.log | tail -70
step i32 50 $R 45 -- $B/intranode-bench bench --no-decode --no-skew --ks 16 --graph-only --calls 300 --max-bytes 1048576 --dtype i32 --op sum --out $OUT/i32
sed -n '/as nccl-tests prints it/,$p' $OUT/l/i32.log | head -30

cd $OUT && tar czf final-logs.tgz l large small i32 2>/dev/null; rm -rf $OUT/l $OUT/large $OUT/small $OUT/i32
echo "== done at $(el) s"
