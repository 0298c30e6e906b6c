#!/bin/bash
# v14 run 2 (issue 34, items 2 and 4): the base build (main 46eeda2,
# bundle-base/) against this branch (bundle-new/), same machine, same call.
#   1. world 4, 64 KiB-16 MiB, Lamport one-shot and two-shot, NCCL, auto:
#      base, new, base, new (the spread between turns is the noise);
#   2. new, the two-shot under launch shapes of several rounds per thread
#      ($SHAPES; the v14 interleave of reduce and scatter acts only there);
#      the same shapes on base are in run 1 (sweep1.sh, shapes_w4.txt);
#   3. world 4 reduce-scatter and all-gather, 1-64 MiB, ours / NCCL / auto,
#      base then new (base sends shards past 8 MiB to NCCL: no ours row);
#   4. the push form (v14: push and copy-out in one pass) at world 4,
#      16 MiB-1 GiB, base then new, NCCL beside;
#   5. world 2 on GPUs 0,1, 1 KiB-256 MiB (push included): base, new
#      (nothing may get slower);
#   6. correctness of new at world 4: the suite's check for the Lamport
#      forms and push (reduced counts) and its reduce-scatter / all-gather
#      checks (a shard past a slot among them).
# Usage, from the repo root:
#   OUT=DIR [BASE=bundle-base] [NEW=bundle-new] [SHAPES="132x128 ..."] bash archive/perf/v14/perf_run.sh
# Writes 7 files under $OUT; prints a compact table last. About 7-8 minutes.
set -u
: "${OUT:?set OUT}"
BASE=${BASE:-bundle-base}
NEW=${NEW:-bundle-new}
SHAPES=${SHAPES:-132x128 132x256}
export NCCL_NVLS_ENABLE=0
unpack() {
    mkdir -p "$2"
    for f in "$1"/*.gz; do
        n=$(basename "$f" .gz)
        gzip -dc "$f" >"$2/$n" && chmod +x "$2/$n"
    done
}
B=/tmp/v14-base
N=/tmp/v14-new
unpack "$BASE" $B
unpack "$NEW" $N
nvidia-smi -L
dir() { if [ "$1" = base ]; then echo $B; else echo $N; fi; }
run() { # bin-dir, world, timeout, binary, args...
    local d=$1 w=$2 t=$3 bin=$4
    shift 4
    timeout $((t + 10)) $d/intranode-run --nproc-per-node $w --failure-wait-secs 10 --timeout $t -- $d/$bin "$@"
}
# The table rows of a bench log: bytes algo mean_us x_nccl.
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
common="bench --ks 16 --graph-only --no-decode --no-skew --calls 2000 --large-calls 300"
mid="$common --algos lamport,lamport-two-shot,nccl,auto --min-bytes 65536 --max-bytes 16777216"
: >$OUT/mid_w4.txt
for turn in 1 2; do
    for v in base new; do
        echo "== 1. world 4 mid range: $v, turn $turn"
        run $(dir $v) 4 60 intranode-bench $mid --out /tmp/mid-$v-$turn >/tmp/mid-$v-$turn.log 2>&1
        echo "rc=$?"
        rows /tmp/mid-$v-$turn.log | sed "s/^/$v$turn /" >>$OUT/mid_w4.txt
    done
done
: >$OUT/shapes_new_w4.txt
for shape in $SHAPES; do
    echo "== 2. new, two-shot shape $shape"
    INTRANODE_LAMPORT_LAUNCH="lamport-two-shot=$shape" run $N 4 50 intranode-bench $common \
        --algos lamport-two-shot --min-bytes 262144 --max-bytes 16777216 --out /tmp/sh-$shape \
        >/tmp/sh-$shape.log 2>&1
    echo "rc=$?"
    rows /tmp/sh-$shape.log | sed "s/^/$shape /" >>$OUT/shapes_new_w4.txt
done
: >$OUT/sg_w4.txt
for coll in reduce-scatter all-gather; do
    for v in base new; do
        echo "== 3. world 4 $coll: $v"
        run $(dir $v) 4 80 intranode-bench $common --collective $coll --algos ours,nccl,auto \
            --min-bytes 1048576 --max-bytes 67108864 --out /tmp/sg-$coll-$v >/tmp/sg-$coll-$v.log 2>&1
        echo "rc=$?"
        rows /tmp/sg-$coll-$v.log | sed "s/^/$coll-$v /" >>$OUT/sg_w4.txt
    done
done
: >$OUT/push_w4.txt
for v in base new; do
    echo "== 4. world 4 push: $v"
    run $(dir $v) 4 70 intranode-bench $common --algos push,nccl --min-bytes 16777216 \
        --max-bytes 1073741824 --out /tmp/push-$v >/tmp/push-$v.log 2>&1
    echo "rc=$?"
    rows /tmp/push-$v.log | sed "s/^/$v /" >>$OUT/push_w4.txt
done
: >$OUT/w2.txt
for v in base new; do
    echo "== 5. world 2 (GPUs 0,1): $v"
    CUDA_VISIBLE_DEVICES=0,1 run $(dir $v) 2 70 intranode-bench $common \
        --algos lamport,lamport-two-shot,push,nccl,auto --max-bytes 268435456 --out /tmp/w2-$v >/tmp/w2-$v.log 2>&1
    echo "rc=$?"
    rows /tmp/w2-$v.log | sed "s/^/$v /" >>$OUT/w2.txt
done
echo "== 6. correctness of new at world 4"
INTRANODE_BARRIER_TIMEOUT_MS=5000 run $N 4 90 intranode-suite check --algos lamport,lamport-two-shot,push,auto \
    --stress-calls 300 --graph-replays 10 --free-replays 3 >$OUT/check_w4.log 2>&1
echo "check rc=$?"
grep -v "done, last" $OUT/check_w4.log | grep -E "ok|rror|FAIL|wrong|mismatch|panick" | tail -6
INTRANODE_BARRIER_TIMEOUT_MS=5000 run $N 4 60 intranode-suite check --only-scatter-gather >$OUT/check_sg_w4.log 2>&1
echo "check-sg rc=$?"
grep -v "done, last" $OUT/check_sg_w4.log | grep -E "ok|rror|FAIL|wrong|mismatch|panick" | tail -4
echo "== summary (mean us, graph of 16; x NCCL where the row has it)"
echo "-- 1. world 4: bytes algo base1 new1 base2 new2"
awk '{k=$2" "$3; v[k]=v[k]" "$4; if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i] v[key[i]]}' $OUT/mid_w4.txt | sort -k1,1n -k2,2
echo "-- 2. new two-shot by shape: shape bytes mean"
awk '{print $1, $2, $4}' $OUT/shapes_new_w4.txt
echo "-- 3. scatter/gather: what bytes algo mean x_nccl"
sort -k1,1 -k2,2n $OUT/sg_w4.txt
echo "-- 4. world 4 push: bytes algo base new"
awk '{k=$2" "$3; v[k]=v[k]" "$4; if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i] v[key[i]]}' $OUT/push_w4.txt | sort -k1,1n -k2,2
echo "-- 5. world 2: bytes algo base new"
awk '{k=$2" "$3; v[k]=v[k]" "$4; if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i] v[key[i]]}' $OUT/w2.txt | sort -k1,1n -k2,2
echo "== done"
