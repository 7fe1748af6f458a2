#!/usr/bin/env bash
# Session 8 call 1: build gpu/s9 (main + wip cpp-autograd, row-knobs-once, rms-tile32, carveout-knob),
# C++ tests as 4 shards beside the Python files run at once, host time a call.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $OUT || exit 1
echo "build done at $((SECONDS-T0)) s"
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 REDUCEKIT_PY_PARALLEL=1 timeout 330 bash scripts/gpu_run.sh $OUT
echo "tests rc $? done at $((SECONDS-T0)) s"
timeout 40 python3 bench/host_overhead.py --calls 20000 --out $OUT/host
echo "host done at $((SECONDS-T0)) s"
