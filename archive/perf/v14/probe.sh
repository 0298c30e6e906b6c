#!/bin/bash
# Issue 36, item 1: where a kernel module's load/unload loses device
# memory (4.4 MiB a cycle on H100). One GPU, no launcher: run on H100 and
# on H200 (nvidia-h100-x1 / nvidia-h200).
# Usage, from the repo root, after `cargo xtask device-bundle` (bundle/):
#   OUT=DIR archive/perf/v14/probe.sh
# Writes $OUT/probe_default.log, $OUT/probe_eager.log, $OUT/probe_lazy.log.
set -u
: "${OUT:?set OUT}"
B=${BUNDLE:-bundle}
N=/tmp/v14-probe
mkdir -p $N
gzip -dc $B/intranode-suite.gz >$N/intranode-suite && chmod +x $N/intranode-suite
# The bundle embeds no PTX: the `ptx` part reads the committed one.
gzip -dc host/ptx/kernels-sm_90.ptx.gz >$N/kernels.ptx
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
P="$N/intranode-suite module-probe --cycles 5"
echo "== module loading mode unset (every part, the PTX too)"
env -u CUDA_MODULE_LOADING timeout 240 $P --ptx $N/kernels.ptx --ptx-cycles 2 >$OUT/probe_default.log 2>&1
echo "rc=$?"
cat $OUT/probe_default.log
for mode in EAGER LAZY; do
    echo "== CUDA_MODULE_LOADING=$mode (the cubin parts)"
    CUDA_MODULE_LOADING=$mode timeout 120 $P \
        --parts control,sys,sys-resolve,kernel-module,kernel-module-launch,small,hold,library \
        >$OUT/probe_$(echo $mode | tr A-Z a-z).log 2>&1
    echo "rc=$?"
    grep -E "module-probe: (device|[a-z-]+ +[0-9]+ cycles|hold)" $OUT/probe_$(echo $mode | tr A-Z a-z).log
done
echo "== done"
