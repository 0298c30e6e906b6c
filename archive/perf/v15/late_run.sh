#!/bin/bash
# v15 (issue 34 item 7's finding): NOTE [no arrival after giving up], one
# call on 4 GPUs, new = this branch (bundle-new/: intranode-run, -bench, -suite), base = main before it
# (bundle-pt/):
#   1. faults-suite at world 4, every case (the late victim of one-shot,
#      Lamport one-shot, Lamport two-shot and push, and of one-shot,
#      two-shot and push at 16 MiB, must now fail or return the exact sum
#      and fail on its next call; before, its late call returned Ok on
#      whatever it found);
#   2. the suite's check at world 4 on every form of ours (reduced
#      counts): nothing else changed;
#   3. base then new, graph of 16 calls free-running, 256 KiB-64 MiB: the
#      abort-word read before each barrier arrival and push signal costs
#      nothing measurable (prediction: within 1 %).
# Usage, from the repo root:  OUT=DIR bash archive/perf/v15/late_run.sh
# Writes faults_w4.log, check_w4.log, ab_w4.txt;
# about 7 minutes.
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0
unpack() {
    mkdir -p "$2"
    for f in "$1"/*.gz; do
        n=$(basename "$f" .gz)
        gzip -dc "$f" >"$2/$n" && chmod +x "$2/$n" || exit 1
    done
}
B=/tmp/v15-base
N=/tmp/v15-new
unpack bundle-pt $B
unpack bundle-new $N
nvidia-smi -L
echo "== 1. faults-suite --nproc 4"
INTRANODE_REQUIRE_GPUS=4 timeout 290 $N/intranode-suite faults-suite --nproc 4 >$OUT/faults_w4.log 2>&1
echo "rc=$?"
grep -E "^faults-suite: (PASS|FAIL)|cases failed" $OUT/faults_w4.log | cut -c1-160
grep -E "victim.*(late call|next one)|FAIL late" $OUT/faults_w4.log | cut -c1-330 | head -8
echo "== 2. check at world 4"
timeout 110 $N/intranode-run --nproc-per-node 4 --timeout 100 -- $N/intranode-suite check \
    --algos lamport,lamport-two-shot,one-shot,two-shot,push --stress-calls 150 --graph-replays 10 \
    --free-replays 3 >$OUT/check_w4.log 2>&1
echo "rc=$?"
grep -v "done, last" $OUT/check_w4.log | grep -E "^\[0\] check|FAIL|rror|wrong" | cut -c1-250 | head -4
echo "== 3. base / new, world 4"
rows() { grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+/' "$1" | awk '{print $2, $3, $6, $7}'; }
: >$OUT/ab_w4.txt
for v in base new; do
    d=$B
    [ $v = new ] && d=$N
    timeout 65 $d/intranode-run --nproc-per-node 4 --timeout 55 -- $d/intranode-bench bench --ks 16 \
        --graph-only --no-decode --no-skew --calls 2000 --large-calls 300 \
        --algos lamport,lamport-two-shot,two-shot,push,nccl --min-bytes 262144 --max-bytes 67108864 \
        --out /tmp/ab-$v >/tmp/ab-$v.log 2>&1
    echo "$v rc=$?"
    rows /tmp/ab-$v.log | sed "s/^/$v /" >>$OUT/ab_w4.txt
done
join <(awk '$1=="base"{print $2"-"$3, $4}' $OUT/ab_w4.txt | sort) \
    <(awk '$1=="new"{print $2"-"$3, $4}' $OUT/ab_w4.txt | sort) |
    awk '{printf "%-28s base %9s new %9s  %+.1f%%\n", $1, $2, $3, ($3/$2-1)*100}' | sort -t- -k1,1n
echo "== done ($SECONDS s)"
