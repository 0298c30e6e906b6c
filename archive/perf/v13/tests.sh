#!/bin/bash
# v13, after the merges: every test executable of `cargo xtask
# device-bundle` on 2 GPUs with the GPU tests required (run-tests.sh:
# unit, integration and GPU tests, then the examples under the launcher),
# then the GPU suite's `check` with its default counts.
# Usage, from the repo root with the bundle in bundle/: OUT=DIR archive/perf/v13/tests.sh
set -u
: "${OUT:?set OUT}"
export NCCL_NVLS_ENABLE=0 INTRANODE_REQUIRE_GPUS=2
D=$(sh bundle/unpack.sh /tmp/v13-tests)
cd "$D" || exit 1
nvidia-smi -L
echo "== run-tests.sh"
timeout 330 ./run-tests.sh >"$OUT/run_tests.log" 2>&1
echo "rc=$?"
grep -E "^== |test result|FAILED|SKIPPED|panicked|exact" "$OUT/run_tests.log" | grep -v "test result: ok. 0 passed" | tail -70
echo "== intranode-suite check, default counts"
timeout 220 ./intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout 210 -- ./intranode-suite check >"$OUT/check_full.log" 2>&1
echo "rc=$?"
grep -v "done, last" "$OUT/check_full.log" | grep -E "ok|FAIL|wrong|panick" | tail -6
echo "== done"
