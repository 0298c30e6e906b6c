#!/bin/bash
# QUEUED (the v14 session's device time ran out before it): issue 34 item 6,
# candle-tp at TP4 then TP2 with the back-ends interleaved in 60 windows
# (docs/perf/v14/candle_run.sh says what it prints). Its bundle is not the
# plain device bundle: `cargo xtask candle-example --out bundle/candle`
# (candle-tp, libcudart.so.13, intranode-run; about 25 minutes of nvcc on
# 2 cores) puts it where this script looks.
# Usage, from the repo root on a machine with 4 GPUs:
#   OUT=DIR bash docs/perf/queue/candle_tp_interleaved.sh
# Writes $OUT/w4_b{1,8,32}.txt, $OUT/w2_b{1,8,32}.txt, $OUT/run.log; under
# 9 minutes.
set -u
: "${OUT:?set OUT}"
exec bash docs/perf/v14/candle_run.sh bundle/candle
