#!/bin/bash
# 1 H200: the landed library after the store exchange's envelopes (every
# rendezvous writes through them), the per-communicator NCCL prefix and
# INTRANODE_GROUP. (a) 4 and 2 ranks under MPS: every check stage,
# recreate, bad-input; (b) two groups of two ranks on one store and one
# GPU, named (both must pass) and unnamed (one must be refused at once,
# naming the other group, never mixing data).
set -u
B=bundle2
BUDGET=${BUDGET:-520}
unpack() { mkdir -p $2; for f in $1/*.gz; do n=$(basename $f .gz); gzip -dc $f > $2/$n && chmod +x $2/$n; done; }
unpack $B/new /tmp/new
mkdir -p /tmp/l
export INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=10000
cat > /tmp/new/two-groups <<'W'
#!/bin/bash
# Four launcher ranks as two groups of two on the launcher's one store.
g=$((RANK/2))
export RANK=$((RANK%2)) LOCAL_RANK=$((LOCAL_RANK%2)) WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
[ "${NAMED:-0}" = 1 ] && export INTRANODE_GROUP=g$g
exec /tmp/new/intranode-suite "$@"
W
chmod +x /tmp/new/two-groups
go() { # tag mode n timeout prog args...
  local tag=$1 mode=$2 n=$3 to=$4; shift 4
  local g=$(seq -s, 0 $((n-1)) | sed 's/[0-9]\+/0/g')
  [ $SECONDS -gt $BUDGET ] && { echo "$tag skipped"; return; }
  local t0=$SECONDS m=""
  [ $mode = mps ] && m=--mps
  timeout $((to+10)) /tmp/new/intranode-run $m --failure-wait-secs 5 --timeout $to --nproc-per-node $n --gpus $g -- "$@" > /tmp/l/$tag.log 2>&1
  local rc=$?
  pkill -f nvidia-cuda-mps >/dev/null 2>&1 && sleep 1
  echo "$tag rc=$rc $((SECONDS-t0))s: $(grep -hE 'check rank 0|got |never came|ran out|rror|passed|another group' /tmp/l/$tag.log | grep -v 'per GPU at most' | head -3 | cut -c1-420)"
}
S=/tmp/new/intranode-suite
C="--stress-calls 300 --graph-replays 100 --free-replays 20 --hog-rounds 10"
{
go check4 mps 4 200 $S check $C
go recreate4 mps 4 100 $S recreate
go bad2 mps 2 100 $S bad-input
go check2 mps 2 150 $S check $C
NAMED=1 go groups_named_ts ts 4 100 /tmp/new/two-groups check --only-stress --stress-calls 40
NAMED=0 go groups_unnamed_ts ts 4 60 /tmp/new/two-groups check --only-stress --stress-calls 40
NAMED=1 go groups_named_mps mps 4 100 /tmp/new/two-groups check --only-types
} 2>&1 | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C /tmp l
