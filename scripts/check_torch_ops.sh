#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compile check of the PyTorch operators (python/csrc) on a machine without a GPU or torch, where
# the README's build skips them: installs torch (the GPU machine's version, CUDA build from PyPI,
# no dependencies beyond what `import torch` and linking need) into a venv outside the tree,
# configures a build folder outside it (device code in the fast-compile mode) and builds the
# operator library and the eager entries; then loads both and lists what they hold, and runs the
# Python package over them on meta tensors (tests/meta/check_meta.py: shapes and dtypes against
# torch's own ops).
#
#   bash scripts/check_torch_ops.sh [VENV (default /tmp/reducekit-torch-venv)] [BUILD (default /tmp/reducekit-torch-build)]
#
# Exit status 3: torch could not be installed (no network), so nothing was compiled.
# About 1.6 GB of venv (25 s to install) and 850 MB of build; the first build 4 minutes on 2 cores.
source "$(dirname "$0")/common.sh"
venv="${1:-/tmp/reducekit-torch-venv}"
build="${2:-/tmp/reducekit-torch-build}"
BUILD="$build"  # the folder generator_args looks at
torch_version="${REDUCEKIT_CHECK_TORCH_VERSION:-2.11.0}"
ensure_tools
install_torch() {
  python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --no-deps "torch==$torch_version" &&
    "$venv/bin/pip" install -q --no-warn-conflicts typing_extensions sympy networkx jinja2 filelock fsspec &&
    # libtorch's CUDA libraries that a CUDA toolkit lacks, at the versions torch 2.11's metadata names
    "$venv/bin/pip" install -q --no-warn-conflicts "cuda-toolkit[cufile]==13.0.2" nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 &&
    "$venv/bin/python" -c "import torch" >/dev/null 2>&1
}
if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1 && ! install_torch; then
  echo "check_torch_ops: could not install torch $torch_version into $venv (no network?): not compiled" >&2
  exit 3
fi
# A build folder left by another checkout (the default lies outside the tree) starts afresh.
if [ -f "$build/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$REPO" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
# SKBUILD keeps the libraries in the build folder (not python/reducekit) and makes a torch that
# does not import a configure error instead of a skip.
cmake -S "$REPO" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$venv/bin/python" \
  -DREDUCEKIT_CHECK_ONLY_DEVICE_CODE=ON -DSKBUILD=ON -DREDUCEKIT_BUILD_TESTS=OFF -DREDUCEKIT_INSTALL=OFF \
  -DTORCH_CUDA_ARCH_LIST=9.0 $(generator_args "$venv/bin/python") >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target reducekit_torch reducekit_eager -j "$JOBS"
"$venv/bin/python" -W ignore - "$build/python/csrc" <<'PY'
import glob, importlib.util, sys
import torch
folder = sys.argv[1]
torch.ops.load_library(f"{folder}/libreducekit_torch.so")
ops = sorted({s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith("reducekit::")})
spec = importlib.util.spec_from_file_location("_eager", glob.glob(f"{folder}/_eager*.so")[0])
eager = importlib.util.module_from_spec(spec)
spec.loader.exec_module(eager)
print(f"loaded: {len(ops)} reducekit operators; eager entries: {', '.join(n for n in dir(eager) if not n.startswith('_'))}")
PY
# The Python package over the libraries just built, every op on meta tensors against torch's.
rm -rf "$build/package" && mkdir -p "$build/package/reducekit"
cp "$REPO"/python/reducekit/*.py "$build"/python/csrc/*.so "$build/package/reducekit/"
REDUCEKIT_PYTHON_PATH="$build/package" "$venv/bin/python" -W ignore "$REPO/tests/meta/check_meta.py"
