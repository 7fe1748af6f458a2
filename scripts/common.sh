# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts here: makes sure the build tools exist, then configures and builds.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${REDUCEKIT_BUILD_DIR:-$REPO/build}"
JOBS="${REDUCEKIT_JOBS:-$(nproc)}"

# Debian packages the build needs; installed only where missing and where apt can run.
ensure_tools() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  [ -e /usr/include/gtest/gtest.h ] || [ -e /usr/local/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      echo "== installing ${missing[*]}"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "missing build tools: ${missing[*]} (install them, then run again)" >&2
      exit 1
    fi
  fi
  command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
  command -v nvcc >/dev/null || { echo "nvcc not found: install the CUDA toolkit (12.8 or newer)" >&2; exit 1; }
}

# Ninja where it exists (on PATH or beside python3, as in a venv holding torch) and the build
# folder is new or already Ninja's: Makefiles start the torch operators' compiles only once the
# library is linked, Ninja overlaps them (the GPU machine's build about 17% sooner, LOG.md).
generator_args() {
  local ninja
  ninja="$(command -v ninja || true)"
  [ -z "$ninja" ] && [ -n "$1" ] && [ -x "$(dirname "$1")/ninja" ] && ninja="$(dirname "$1")/ninja"
  [ -n "$ninja" ] || return 0
  case "${REDUCEKIT_CMAKE_ARGS:-}" in *-G*) return 0 ;; esac
  if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=Ninja$" "$BUILD/CMakeCache.txt"; then
    return 0
  fi
  echo "-G Ninja -DCMAKE_MAKE_PROGRAM=$ninja"
}

# Without a GPU nothing runs the kernels, so their code is compiled as a check only
# (REDUCEKIT_CHECK_ONLY_DEVICE_CODE, CMakeLists.txt: nvcc's fast-compile mode); with one, optimized.
# Arguments: more CMake definitions (-D...).
configure_and_build() {
  ensure_tools
  local python check_only
  python="$(command -v python3 || true)"
  check_only=$(have_gpu && echo OFF || echo ON)
  cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${python:+-DPython3_EXECUTABLE="$python"} \
    -DREDUCEKIT_CHECK_ONLY_DEVICE_CODE=$check_only $(generator_args "$python") "$@" \
    ${REDUCEKIT_CMAKE_ARGS:-} >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
  grep -E "reducekit:" "$BUILD.configure.log" || true
  cmake --build "$BUILD" -j "$JOBS"
}

# The Python package as a user installs it (`pip install --no-build-isolation .`, README), into
# $SITE rather than the running environment, so that the tests and the benchmark import the
# installed copy (PYTHONPATH=$SITE) and the environment is left as it was. scikit-build-core
# keeps its build in $BUILD/wheel, so a second run rebuilds only what changed. Ninja where
# generator_args finds it (scikit-build-core looks for it on PATH only).
SITE="$BUILD/site"
install_python_package() {
  local python ninja_dir start=$SECONDS
  python="$(command -v python3)"
  ninja_dir="$(generator_args "$python" | sed -n 's/.*-DCMAKE_MAKE_PROGRAM=\(.*\)\/ninja$/\1/p')"
  rm -rf "$SITE"
  PATH="$PATH${ninja_dir:+:$ninja_dir}" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    CMAKE_ARGS="-DREDUCEKIT_CHECK_ONLY_DEVICE_CODE=$(have_gpu && echo OFF || echo ON)" \
    "$python" -m pip install --no-build-isolation --no-deps --no-index --target "$SITE" \
    --config-settings=build-dir="$BUILD/wheel" "$REPO" >"$BUILD.pip.log" 2>&1 ||
    { tail -40 "$BUILD.pip.log"; echo "pip install of the Python package failed (log: $BUILD.pip.log)" >&2; return 1; }
  echo "installed $(PYTHONPATH="$SITE" "$python" -c 'import reducekit; print("reducekit", reducekit.__version__, "in", reducekit.__file__.rsplit("/", 2)[0])' 2>&1 | tail -1) ($((SECONDS - start)) s)"
}

# True when python3 can import torch (the Python tests and the benchmark need it).
have_torch() { python3 -c "import torch" >/dev/null 2>&1; }

# True when the driver sees at least one GPU (where the GPU tests and the Python tests must run).
have_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# On a GPU machine, the Python modules `$@` must import: one line naming the missing ones, and
# exit 1, instead of a green run that skipped the Python side. Without a GPU nothing is required.
require_python_modules_on_gpu() {
  have_gpu || return 0
  local missing=() m
  for m in "$@"; do python3 -c "import $m" >/dev/null 2>&1 || missing+=("$m"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "this machine has a GPU but python3 cannot import: ${missing[*]} (torch: see README, Install; the rest: pip install -r requirements-dev.txt)" >&2
    exit 1
  fi
}
