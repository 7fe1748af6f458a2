#!/usr/bin/env bash
# One call on the GPU machine: build, C++ and Python GPU tests, a sanitizer pass, the benchmark.
# Logs, JSON and the plot go to $1 (default $OUT). Stages: REDUCEKIT_STAGES="build cpp py san bench".
source "$(dirname "$0")/common.sh"
OUT_DIR="${1:-${OUT:-$REPO/bench/results/latest}}"
STAGES="${REDUCEKIT_STAGES:-build cpp py san bench}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
set +e
status=0
stage() { [[ " $STAGES " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if stage build; then
  echo "== build"; start=$SECONDS
  configure_and_build >"$OUT_DIR/build.log" 2>&1 || { tail -50 "$OUT_DIR/build.log"; exit 1; }
  echo "build: $((SECONDS - start)) s"
fi
if stage cpp; then
  echo "== C++ tests"
  "$BUILD/reducekit_tests" --gtest_brief=1 >"$OUT_DIR/cpp_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran|Failure|error" "$OUT_DIR/cpp_tests.log" | head -40
fi
if stage py; then
  echo "== Python tests"
  python3 -m pytest -q "$REPO/tests/python" -rs --maxfail=20 --tb=line >"$OUT_DIR/py_tests.log" 2>&1 || status=1
  tail -3 "$OUT_DIR/py_tests.log"
fi
if stage bench; then
  echo "== benchmark"
  # bench.py writes bench.log, results.json and bench.png into OUT_DIR itself.
  python3 "$REPO/bench/bench.py" --out "$OUT_DIR" ${REDUCEKIT_BENCH_ARGS:-} 2>&1 | tail -100
fi
if stage san; then
  echo "== compute-sanitizer (memcheck, racecheck) on a reduced suite"
  filter="${REDUCEKIT_SAN_FILTER:-SoftmaxGpu.RingKernelLoopsOverManyRows:SoftmaxGpu.InPlace:SoftmaxErrors.*}"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/reducekit_tests" --gtest_filter="$filter" \
      --gtest_brief=1 >"$OUT_DIR/sanitizer_$tool.tmp" 2>&1
    echo "$tool: exit $? ($(grep -cE '^========= (Invalid|Race|Error)' "$OUT_DIR/sanitizer_$tool.tmp") reports)"
    cat "$OUT_DIR/sanitizer_$tool.tmp" >>"$OUT_DIR/sanitizer.log" && rm "$OUT_DIR/sanitizer_$tool.tmp"
  done
fi
exit $status
