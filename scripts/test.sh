#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every test: configures and builds (installing missing build tools where it can), runs the
# C++ tests (host planning, the CPU oracle, and GPU tests, which skip with a message where no
# GPU is present), then the Python tests where torch is importable. On a GPU machine torch and
# pytest are required (it stops at once, saying which is missing).
source "$(dirname "$0")/common.sh"
require_python_modules_on_gpu torch pytest hypothesis
configure_and_build

echo "== C++ tests (ctest, $JOBS at once)"
ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure >"$BUILD.ctest.log" 2>&1 || { cat "$BUILD.ctest.log"; exit 1; }
grep -E "tests passed|Total Test time" "$BUILD.ctest.log"
echo "$(grep -c '(Skipped)' "$BUILD.ctest.log" || true) skipped (GPU tests without a GPU)"

echo "== C++ package: install, then build and run examples/cpp against the installed package"
cmake --install "$BUILD" --prefix "$BUILD/install" >"$BUILD.install.log"
cmake -S "$REPO/examples/cpp" -B "$BUILD/example" -DCMAKE_PREFIX_PATH="$BUILD/install" \
  >"$BUILD.example.log" 2>&1 || { cat "$BUILD.example.log"; exit 1; }
cmake --build "$BUILD/example" -j "$JOBS" >>"$BUILD.example.log" 2>&1 || { cat "$BUILD.example.log"; exit 1; }
"$BUILD/example/reducekit_example"

if have_torch && python3 -c "import pytest" >/dev/null 2>&1; then
  echo "== Python tests"
  python3 -m pytest -q "$REPO/tests/python" -rs "$@"
else
  echo "== Python tests skipped: no GPU here, and python3 cannot import torch and pytest (they need a CUDA machine with torch)"
fi
