#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every test: configures and builds (installing missing build tools where it can), runs the
# C++ tests (host planning, the CPU oracle, and GPU tests, which skip with a message where no
# GPU is present) and, beside them, installs the Python package (pip, into the build folder) and
# runs the Python tests against it where torch is importable; then installs the C++ package and
# builds the example against it. On a GPU machine torch and pytest are required
# (it stops at once, saying which is missing).
source "$(dirname "$0")/common.sh"
require_python_modules_on_gpu torch pytest hypothesis scikit_build_core
python_side=0
if have_torch && python3 -c "import pytest, scikit_build_core" >/dev/null 2>&1; then python_side=1; fi
# The CMake build is the C++ library and its tests; the PyTorch operators are built by the
# Python package's install below, which the Python tests then import.
configure_and_build $([ $python_side = 1 ] && echo -DREDUCEKIT_BUILD_TORCH=OFF)

# The C++ tests (ctest, $JOBS at once) run beside the package's install and then the Python test
# files, one pytest process a file, all at once (REDUCEKIT_TESTS_SERIAL=1: one after the other):
# the GPU and the cores have room for both, and the slowest process sets the Python side's time.
parallel=$([ "${REDUCEKIT_TESTS_SERIAL:-0}" = 1 ] && echo 0 || echo 1)
start=$SECONDS
echo "== C++ tests (ctest, $JOBS at once)$([ $python_side = 1 ] && [ $parallel = 1 ] && echo ", beside the Python package's install and tests")"
ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure >"$BUILD.ctest.log" 2>&1 &
ctest_pid=$!
ctest_rc=0
if [ $parallel = 0 ]; then wait $ctest_pid || ctest_rc=$?; fi

py_rc=0
if [ $python_side = 1 ]; then
  echo "== Python package: pip install --no-build-isolation into $SITE"
  install_python_package
  export REDUCEKIT_TEST_INSTALLED=1 PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  # One pytest process a file, but the property suite (its Hypothesis budget makes it the
  # longest file by far) as REDUCEKIT_PROPERTY_PROCESSES (default 3) processes of whole test
  # functions dealt round-robin: targets[i] is one process's space-separated pytest targets.
  targets=() labels=()
  split=$([ $parallel = 1 ] && echo "${REDUCEKIT_PROPERTY_PROCESSES:-3}" || echo 1)
  for f in "$REPO"/tests/python/test_*.py; do
    if [ "$(basename "$f")" = test_properties.py ] && [ "$split" -gt 1 ]; then
      mapfile -t names < <(grep -oE '^def test_[A-Za-z0-9_]+' "$f" | cut -d' ' -f2)
      for ((k = 0; k < split && k < ${#names[@]}; ++k)); do
        group=""
        for ((j = k; j < ${#names[@]}; j += split)); do group+=" $f::${names[j]}"; done
        targets+=("${group# }") labels+=("test_properties.py [$((k + 1))/$split]")
      done
    else
      targets+=("$f") labels+=("$(basename "$f")")
    fi
  done
  py_pids=()
  for i in "${!targets[@]}"; do
    read -ra target <<<"${targets[$i]}"
    if [ $parallel = 1 ]; then
      python3 -m pytest -q "${target[@]}" -rs "$@" >"$BUILD.pytest$i.log" 2>&1 &
      py_pids+=($!)
    else
      rc=0
      python3 -m pytest -q "${target[@]}" -rs "$@" >"$BUILD.pytest$i.log" 2>&1 || rc=$?
      echo $rc >"$BUILD.pytest$i.rc"
    fi
  done
  for i in "${!py_pids[@]}"; do
    rc=0
    wait "${py_pids[$i]}" || rc=$?
    echo $rc >"$BUILD.pytest$i.rc"
  done
fi

if [ $parallel = 1 ]; then wait $ctest_pid || ctest_rc=$?; fi
[ "$ctest_rc" = 0 ] || { cat "$BUILD.ctest.log"; exit 1; }
grep -E "tests passed|Total Test time" "$BUILD.ctest.log"
skipped_what=$(have_gpu && echo "tests of a machine without a GPU" || echo "GPU tests without a GPU")
echo "$(grep -c '(Skipped)' "$BUILD.ctest.log" || true) skipped ($skipped_what)"

if [ $python_side = 1 ]; then
  echo "== Python tests (one pytest a file, the property suite in $split)"
  for i in "${!targets[@]}"; do
    echo "${labels[$i]}: $(tail -1 "$BUILD.pytest$i.log")"
    rc=$(cat "$BUILD.pytest$i.rc")
    rm -f "$BUILD.pytest$i.rc"
    # pytest's 5: the module skipped itself at collection, which is right only without a GPU
    if [ "$rc" != 0 ] && { [ "$rc" != 5 ] || have_gpu; }; then
      cat "$BUILD.pytest$i.log"
      py_rc=1
    fi
  done
  if have_gpu; then
    echo "== examples/python/quickstart.py against the installed package"
    python3 "$REPO/examples/python/quickstart.py" || py_rc=1
  fi
else
  echo "== Python tests skipped: no GPU here, and python3 cannot import torch and pytest (they need a CUDA machine with torch)"
fi
echo "tests took $((SECONDS - start)) s"

echo "== C++ package: install, then build and run examples/cpp against the installed package"
cmake --install "$BUILD" --prefix "$BUILD/install" >"$BUILD.install.log"
cmake -S "$REPO/examples/cpp" -B "$BUILD/example" -DCMAKE_PREFIX_PATH="$BUILD/install" \
  >"$BUILD.example.log" 2>&1 || { cat "$BUILD.example.log"; exit 1; }
cmake --build "$BUILD/example" -j "$JOBS" >>"$BUILD.example.log" 2>&1 || { cat "$BUILD.example.log"; exit 1; }
"$BUILD/example/reducekit_example"
echo "== C++ package from source: a FetchContent consumer's configure (tests/cmake/fetch_content)"
cmake -S "$REPO/tests/cmake/fetch_content" -B "$BUILD/fetch_content" -DREDUCEKIT_SOURCE_DIR="$REPO" \
  >"$BUILD.fetch_content.log" 2>&1 || { cat "$BUILD.fetch_content.log"; exit 1; }
grep -E "as a subproject" "$BUILD.fetch_content.log"
exit $py_rc
