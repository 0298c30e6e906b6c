# The queue's common part, sourced by every script here (not run on its
# own). A queued script runs from the repository root on a GPU machine,
# with the device bundle (`cargo xtask device-bundle`, the binaries
# gzipped) in bundle/:
#
#   OUT=DIR bash docs/perf/queue/NAME.sh
#
# Its results go to $OUT only; the binaries are unpacked into a scratch
# folder that is removed when the script exits.
#
#   queue_start BIN...   checks $OUT, unpacks bundle/BIN.gz (every
#                        bundle/*.gz when no BIN is named) into $D, makes
#                        $L (logs) and sets $N (the GPUs nvidia-smi lists)
#   ranks T N ARGS...    intranode-run with N ranks, at most T seconds
#                        (its own timeout 5 s less, so it reports first);
#                        ARGS: launcher options, `--`, the command
#   past S WHAT          true, saying WHAT is skipped, once more than S
#                        seconds of the script have gone
#   rows LOG             the table rows of an `intranode-bench bench` log
#   first_gpus W         "0,1,...,W-1"
#   queue_logs           packs $L into $OUT/logs.tgz

set -u
: "${OUT:?set OUT to the folder the results go to}"
export NCCL_NVLS_ENABLE=0
# How long intranode-run waits for the other ranks once one has failed.
FAILURE_WAIT_S=${FAILURE_WAIT_S:-5}

queue_start() {
    mkdir -p "$OUT" || exit 1
    D=$(mktemp -d "${TMPDIR:-/tmp}/intranode-queue.XXXXXX") || exit 1
    trap 'rm -rf "$D"' EXIT
    L=$D/logs
    mkdir -p "$L"
    local f n
    if [ $# -eq 0 ]; then
        set -- $(cd bundle 2>/dev/null && ls *.gz | sed 's/\.gz$//')
    fi
    for n in "$@"; do
        f=bundle/$n.gz
        [ -f "$f" ] || { echo "$f missing (cargo xtask device-bundle)" | tee "$OUT/summary.txt"; exit 1; }
        gzip -dc "$f" >"$D/$n" && chmod +x "$D/$n" || exit 1
    done
    N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
}

ranks() {
    local t=$1 n=$2
    shift 2
    timeout "$t" "$D/intranode-run" --failure-wait-secs "$FAILURE_WAIT_S" --timeout $((t - 5)) \
        --nproc-per-node "$n" "$@"
}

past() {
    [ "$SECONDS" -gt "$1" ] || return 1
    echo "== $2 skipped: $SECONDS s gone"
}

rows() {
    grep -E '^\[0\] +[0-9]+ +[a-z+-]+ +[a-z+-]+ +[0-9.]+' "$1" | awk '{print $2, $3, $4, $5, $6, $7, $8}'
}

first_gpus() {
    seq -s, 0 $(($1 - 1))
}

queue_logs() {
    tar czf "$OUT/logs.tgz" -C "$D" logs
}
