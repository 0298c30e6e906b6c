#!/bin/bash
# Issue 36 items 1, 2, 3, 5 on 4 GPUs (H100 and H200), from the repo root
# after `cargo xtask device-bundle` (bundle/):
#   OUT=DIR PART=a archive/perf/v14/relia.sh     (about 7 minutes on 4 H100; a stream
#   cycle takes about 1 s, most of it in the drop: 50 of them need ~55 s)
#   PART=a: recreate --cycles 50 at world 2 (GPUs 0,1) and 4, with the
#           pieces and the new-stream variant (--stream-cycles 50), judged
#           at 2 MiB / 0 fds / 0 threads; faults-suite --nproc 4 (31 cases:
#           one-shot, two-shot and push at 16 MiB and 1 GiB added); bad-input
#           without INTRANODE_DEBUG; run-tests.sh from a copy of the bundle
#           outside the checkout with INTRANODE_REQUIRE_GPUS=4.
#   PART=b: faults-suite alone (a longer budget); PART=c: run-tests.sh alone;
#   PART=p: module-probe on GPU 0 (library first, then the kept kernels).
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=4
unset INTRANODE_DEBUG
B=${BUNDLE:-$(pwd)/bundle}
N=/tmp/v14-relia
rm -rf $N && mkdir -p $N
# unpack.sh puts the binaries and run-tests.sh in $N, away from the checkout.
sh $B/unpack.sh $N >/dev/null || exit 1
R="$N/intranode-run --failure-wait-secs 10"
nvidia-smi -L
recreate() { # $1: label, rest: launcher arguments
    local label=$1
    shift
    echo "== recreate $label"
    timeout 170 $R "$@" --timeout 165 -- $N/intranode-suite recreate --cycles 50 --pieces 5 \
        --stream-cycles 50 --memory-slack-mib 2 --fd-slack 0 --thread-slack 0 >$OUT/recreate_$label.log 2>&1
    echo "rc=$?"
    grep -E "alone|cycles of|new fds|PASS|rror|lost" $OUT/recreate_$label.log | grep -E "^\[0\]|intranode-run|rror" | head -12
}
faults() {
    echo "== faults-suite --nproc 4"
    timeout ${1:-250} $N/intranode-suite faults-suite --nproc 4 >$OUT/faults_w4.log 2>&1
    echo "rc=$?"
    grep -E "^faults-suite: (PASS|FAIL)" $OUT/faults_w4.log | cut -c1-200
    grep -E "FAIL|came after" $OUT/faults_w4.log | grep -v "^faults-suite" | head -8
}
run_tests() {
    echo "== run-tests.sh from $N (outside the checkout), INTRANODE_REQUIRE_GPUS=4"
    (cd $N && timeout ${1:-150} ./run-tests.sh) >$OUT/run_tests_w4.log 2>&1
    echo "rc=$?"
    grep -E "FAILED|panicked|skipped: no source|^test result: FAILED" $OUT/run_tests_w4.log | head -10
    grep -c "^test result: ok" $OUT/run_tests_w4.log
}
case ${PART:-a} in
a)
    recreate w2 --nproc-per-node 2 --gpus 0,1
    recreate w4 --nproc-per-node 4
    echo "== bad-input, INTRANODE_DEBUG unset"
    timeout 60 $R --nproc-per-node 4 --timeout 55 -- $N/intranode-suite bad-input >$OUT/bad_input_w4.log 2>&1
    echo "rc=$?"
    grep -E "PASS|FAIL" $OUT/bad_input_w4.log | cut -c1-160 | head -8
    faults 240
    run_tests 130
    ;;
b) faults 540 ;;
c) run_tests 540 ;;
p)
    echo "== module-probe, library API first (no earlier load to reuse)"
    timeout 200 $N/intranode-suite module-probe --cycles 5 \
        --parts control,library,sys-resolve,kernel-module-unshared,kernel-module,kernel-module-launch,nvml-raw,nvml-mesh \
        >$OUT/probe_kept.log 2>&1
    echo "rc=$?"
    grep "module-probe" $OUT/probe_kept.log
    ;;
esac
echo "== done"
