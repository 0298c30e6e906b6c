#!/bin/bash
# QUEUED (the v14 session's device time ran out): docs/perf/v14/eight_ranks.sh
# with the back-to-back stage given 150 s a part. Why: at world 4 on 4 H100
# that stage (100 calls up to 70 000 elements, then 60 up to 20 Mi bf16
# elements) took 36 s (docs/perf/v14/final-h100x4/stress_push_w4_long.log),
# so the 26-45 s bounds of the last calls could not tell slow from hung; at
# world 8 on 4 GPUs (two ranks time-slicing each GPU) it is slower still.
# The first world-8 run (docs/perf/v14/eight-h100x4/check_w8_on4.log) did
# report a real barrier timeout in that stage (ranks a call apart), which
# is what this run is to settle: launch overlap on, then off.
# Usage, from the repo root with the bundle in bundle/ (intranode-run.gz and
# intranode-suite.gz at least), on a machine with 4 or more GPUs:
#   OUT=DIR bash docs/perf/queue/eight_ranks_on_four.sh
# Writes $OUT/stress_pdl.log, stress_nopdl.log, norm.log, sg.log, free.log,
# symm.log; about 8.5 minutes.
set -u
: "${OUT:?set OUT}"
STRESS_SECS=150 TOTAL_SECS=500 exec bash docs/perf/v14/eight_ranks.sh
