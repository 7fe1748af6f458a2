#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: build, C++ and Python GPU tests, the benchmark, a sanitizer pass.
# Logs, JSON and the plot go to $1 (default $OUT). Stages: REDUCEKIT_STAGES="build cpp py bench san".
# The benchmark runs once with REDUCEKIT_BENCH_ARGS into $1, or, with REDUCEKIT_BENCH_GROUPS set
# ("name: args; name: args"), once per group into $1/name. The build log stays beside the build
# and the sanitizer log is kept only when it reports something (remote runs bring back few files).
# pytest reads extra arguments from PYTEST_ADDOPTS (e.g. '-m "not large"' skips the multi-GB tests);
# REDUCEKIT_CPP_FILTER is the C++ tests' --gtest_filter (default: all), REDUCEKIT_PY_FILES a glob
# of tests/python files (default test_*.py); REDUCEKIT_TESTS_SIDE_BY_SIDE=1 runs the two suites at once,
# REDUCEKIT_CPP_SHARDS=N the C++ tests as N shards at once, REDUCEKIT_PY_PARALLEL=1 the Python files at once.
source "$(dirname "$0")/common.sh"
OUT_DIR="${1:-${OUT:-$REPO/bench/results/latest}}"
STAGES="${REDUCEKIT_STAGES:-build cpp py bench san}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
set +e
status=0
stage() { [[ " $STAGES " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if stage build; then
  echo "== build"; start=$SECONDS
  configure_and_build >"$BUILD.build.log" 2>&1 || { tail -50 "$BUILD.build.log"; exit 1; }
  echo "build: $((SECONDS - start)) s"
fi
# REDUCEKIT_CPP_SHARDS=N runs the C++ tests as N gtest shards at once, the logs joined into
# cpp_tests.log (one process took 208-244 s on the H200 in runs 21-22; 4 shards beside the Python
# files took ~65 s in run 23).
run_cpp_tests() {
  local shards="${REDUCEKIT_CPP_SHARDS:-1}" rc=0 pids=() i
  if [ "$shards" -le 1 ]; then
    "$BUILD/reducekit_tests" --gtest_brief=1 --gtest_filter="${REDUCEKIT_CPP_FILTER:-*}" >"$OUT_DIR/cpp_tests.log" 2>&1
    return
  fi
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$BUILD/reducekit_tests" --gtest_brief=1 \
      --gtest_filter="${REDUCEKIT_CPP_FILTER:-*}" >"$OUT_DIR/cpp_tests.shard$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  cat "$OUT_DIR"/cpp_tests.shard*.log >"$OUT_DIR/cpp_tests.log" && rm -f "$OUT_DIR"/cpp_tests.shard*.log
  return $rc
}
report_cpp_tests() {
  echo "== C++ tests (exit $1)"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran|Failure|error" "$OUT_DIR/cpp_tests.log" | head -40
  awk '/^\[==========\] [0-9]+ tests? from/ {ran += $2} /^\[  PASSED  \]/ {passed += $4}
       END {print "C++ total: " ran " ran, " passed " passed"}' "$OUT_DIR/cpp_tests.log"
  [ "$1" -eq 0 ] || status=1
}
# REDUCEKIT_TESTS_SIDE_BY_SIDE=1: the C++ tests run in the background while the Python tests run
# (the two suites take about 250 s and 90 s on the H200 one after the other).
cpp_pid=""
if stage cpp; then
  if [ "${REDUCEKIT_TESTS_SIDE_BY_SIDE:-0}" = 1 ] && stage py; then
    run_cpp_tests &
    cpp_pid=$!
  else
    run_cpp_tests
    report_cpp_tests $?
  fi
fi
if stage py; then
  echo "== Python tests"
  # One pytest per file, so a family that fails a lot stops early without hiding the others;
  # REDUCEKIT_PY_PARALLEL=1 runs the files at once (reported in file order all the same).
  : >"$OUT_DIR/py_tests.log"
  files=("$REPO"/tests/python/${REDUCEKIT_PY_FILES:-test_*.py})
  run_py_file() { python3 -m pytest -q "$1" -rs --maxfail=20 --tb=line >"$2.log" 2>&1; echo $? >"$2.rc"; }
  py_pids=()
  for i in "${!files[@]}"; do
    if [ "${REDUCEKIT_PY_PARALLEL:-0}" = 1 ]; then
      run_py_file "${files[$i]}" "$BUILD.pytest$i" &
      py_pids+=($!)
    else
      run_py_file "${files[$i]}" "$BUILD.pytest$i"
    fi
  done
  for pid in "${py_pids[@]}"; do wait "$pid"; done
  for i in "${!files[@]}"; do
    [ "$(cat "$BUILD.pytest$i.rc")" = 0 ] || status=1
    echo "$(basename "${files[$i]}"): $(tail -1 "$BUILD.pytest$i.log")"
    cat "$BUILD.pytest$i.log" >>"$OUT_DIR/py_tests.log"
    rm -f "$BUILD.pytest$i.log" "$BUILD.pytest$i.rc"
  done
fi
if [ -n "$cpp_pid" ]; then
  wait "$cpp_pid"
  report_cpp_tests $?
fi
if stage bench; then
  echo "== benchmark"
  # bench.py writes bench.log, results.json and bench.png into its --out folder itself.
  if [ -n "${REDUCEKIT_BENCH_GROUPS:-}" ]; then
    IFS=';' read -ra groups <<<"$REDUCEKIT_BENCH_GROUPS"
    for group in "${groups[@]}"; do
      name="$(echo "${group%%:*}" | xargs)"
      echo "-- $name"
      python3 "$REPO/bench/bench.py" --out "$OUT_DIR/$name" ${group#*:} 2>&1 | grep -E "^(SUMMARY|copy ceiling|results)"
    done
  else
    python3 "$REPO/bench/bench.py" --out "$OUT_DIR" ${REDUCEKIT_BENCH_ARGS:-} 2>&1 | tail -100
  fi
fi
if stage san; then
  echo "== compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on a reduced suite"
  # A test or two a family, over the kernel paths: staged (one CTA, clusters), ring, split rows,
  # in place, the fused norm backward, batch_norm, cross-entropy, softmax columns, the reduce
  # engine's tickets, and the argument errors (nothing written). 21-50 s a tool on the H200.
  default_filter="SoftmaxGpu.StagedRowsAtEveryOffset:SoftmaxGpu.RingKernelLoopsOverManyRows:SoftmaxGpu.InPlace"
  default_filter+=":SoftmaxErrors.*:SoftmaxGpu.SplitWorkspaceApartAndChecked:NormGpu.BackwardFusedLoopsOverRows"
  default_filter+=":NormGpu.Errors:BatchNormGpu.OutputsAlignedUnlikeX:BatchNormGpu.BadArguments"
  default_filter+=":CrossEntropyGpu.OutOfRangeTargetsGiveNaNRows:SoftmaxColumnsGpu.InPlace"
  default_filter+=":ReduceGpu.TicketsApartFromTheWorkspace:ReduceGpu.RejectsBadArgumentsWithoutWriting"
  # re-read rows and the fused residual forms; one-CTA, cluster and warp rows; column reductions;
  # cross-entropy on staged rows (one CTA, 256-thread CTAs, clusters, gradient in place)
  default_filter+=":NormGpu.RereadRows:SoftmaxGpu.DeterministicAndBatchInvariant"
  default_filter+=":ReduceGpu.ColumnsAreDeterministicAndBatchInvariant"
  default_filter+=":CrossEntropyGpu.StagedRowsDeterministicBatchInvariantAndSafe:CrossEntropyGpu.MatchesTheOracleInEveryDtype"
  # rms_norm's bias kernels (split, staged and register rows, dbias)
  default_filter+=":NormGpu.RmsNormBiasEveryPath"
  # wide rows (1024-thread CTAs) and the residual forms' sum read back, in place too
  default_filter+=":NormGpu.WideRowsAndThePlansTheyReplace:NormGpu.ResidualRowsReadTheirSumBack"
  default_filter+=":NormGpu.ResidualInPlaceMatchesOutOfPlace:NormGpu.PackedWideRowsMatchShiftedOnes"
  filter="${REDUCEKIT_SAN_FILTER:-$default_filter}"
  # SyncBatchNorm's one-rank path apart: NCCL's communicator set-up asks for its kernels of every
  # architecture it ships (cudaFuncGetAttributes inside libnccl, error 209 where one is missing),
  # which memcheck reports as API errors; memory errors are still reported there.
  nccl_filter="BatchNormNcclGpu.OneRankMatchesSingleGpu"
  san_log="$OUT_DIR/sanitizer.log"
  reports=0
  sanitize() {  # TOOL FILTER [compute-sanitizer options]
    local tool=$1 tests=$2 rc n
    shift 2
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" "$BUILD/reducekit_tests" --gtest_filter="$tests" \
      --gtest_brief=1 >"$BUILD.sanitizer.tmp" 2>&1
    rc=$?
    # Each tool ends with its count: "ERROR SUMMARY: N errors" (racecheck: "N hazards displayed").
    n=$(grep -oE 'ERROR SUMMARY: [0-9]+|[0-9]+ hazards displayed' "$BUILD.sanitizer.tmp" | grep -oE '[0-9]+' |
      awk '{s += $1} END {print s + 0}')
    echo "$tool, $([ "$tests" = "$nccl_filter" ] && echo "$nccl_filter" || echo "reduced suite"): exit $rc ($n reports)"
    reports=$((reports + n + (rc != 0)))
    cat "$BUILD.sanitizer.tmp" >>"$BUILD.sanitizer.log" && rm "$BUILD.sanitizer.tmp"
  }
  for tool in memcheck racecheck synccheck initcheck; do sanitize $tool "$filter"; done
  if [ -z "${REDUCEKIT_SAN_FILTER:-}" ]; then
    for tool in memcheck racecheck synccheck initcheck; do
      if [ $tool = memcheck ]; then sanitize $tool "$nccl_filter" --report-api-errors no
      else sanitize $tool "$nccl_filter"; fi
    done
  fi
  if [ "$reports" -gt 0 ]; then cp "$BUILD.sanitizer.log" "$san_log"; status=1; fi
fi
exit $status
