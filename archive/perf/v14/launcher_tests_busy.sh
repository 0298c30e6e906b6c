#!/usr/bin/env bash
# Runs the launcher's tests N times in a row (default 50) while one busy
# loop per core keeps the machine's cores busy, and stops at the first
# failure. Issue 36, item 4: the tests must not race start-up on a loaded
# machine. Run from the repository root; CPU only.
set -u
runs=${1:-50}
cargo test -p intranode-launcher --no-run -q >/dev/null 2>&1 || { echo "build failed"; exit 2; }
busy=()
for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    busy+=($!)
done
stop_busy() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null; done; }
trap stop_busy EXIT
echo "busy loops: ${busy[*]} on $(nproc) cores"
passed=0
for i in $(seq "$runs"); do
    if cargo test -p intranode-launcher -q >/tmp/launcher-run-$$.log 2>&1; then
        passed=$((passed + 1))
        echo "run $i: pass"
    else
        echo "run $i: FAIL"
        grep -E "panicked|FAILED|failures:" -A3 /tmp/launcher-run-$$.log | head -40
        break
    fi
done
rm -f /tmp/launcher-run-$$.log
echo "passed $passed of $runs in a row"
[ "$passed" = "$runs" ]
