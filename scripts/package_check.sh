#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 17's package, one call on the GPU machine (no network; ~5 min, the build ~200 s):
# `pip install --no-build-isolation .` into a folder of its own (/tmp/rk-site, by --target, so the
# venv's torch stays the one in use and the venv is left as it was), then, from a folder outside
# the snapshot: import, a softmax and a sum on CUDA against torch, the import-time torch check on a
# copy whose record names another torch, and tests/python/test_dispatch.py (plus test_bad_inputs.py
# while there is time) against the installed package (REDUCEKIT_TEST_INSTALLED=1). Also checks
# that the build wrote nothing into the snapshot. scikit-build-core and its dependencies are
# installed from the wheels in .whl/ (carried beside the snapshot's files) when python3 lacks it.
# Runs from the repository root or from scripts/ (carry .whl/ where python3 lacks scikit-build-core).
# Logs under $OUT/r, packed into $OUT/all.tgz.
here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/pyproject.toml" ]; then cd "$here"; else cd "$here/.."; fi
source scripts/remote_call.sh
SRC="$PWD"
PY="${PYTHON:-python3}"
SITE=/tmp/rk-site
status=0
command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$PY" -c "import sys, torch; print(sys.executable, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
cmake --version | head -1; nvcc --version | tail -1

echo "== scikit-build-core"
if ! "$PY" -c "import scikit_build_core" 2>/dev/null; then
  "$PY" -m pip install --no-index --find-links "$SRC/.whl" scikit-build-core >"$R/skbuild_install.log" 2>&1 \
    || { tail -20 "$R/skbuild_install.log"; exit 1; }
fi
"$PY" -c "import scikit_build_core, packaging, pathspec; print('scikit-build-core', scikit_build_core.__version__)" || exit 1

echo "== pip install --no-build-isolation --target $SITE ."
rm -rf "$SITE" /tmp/rk-outside /tmp/rk-other
touch /tmp/rk-stamp
start=$SECONDS
CMAKE_BUILD_PARALLEL_LEVEL=16 CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90" timeout 330 \
  "$PY" -m pip install --no-build-isolation --no-deps --no-index -v --target "$SITE" . >"$R/pip_install.log" 2>&1
rc=$?
echo "pip rc $rc, $((SECONDS - start)) s"
grep -E "^\s*(-- reducekit:|\*\*\* )" "$R/pip_install.log"
[ $rc -eq 0 ] || { tail -60 "$R/pip_install.log"; exit 1; }
# Expect none: the build may write only into its own temporary folder and $SITE ($OUT may lie
# inside the snapshot, so it is left out of the search, and so is the snapshot's folder itself).
out_abs="$(cd "$OUT" && pwd)"
written=$(find "$SRC" -newer /tmp/rk-stamp -not -path "$SRC" -not -path "$SRC/.whl*" -not -path "$out_abs*")
echo "written into the snapshot by the build: ${written:-none}"
[ -z "$written" ] || status=1

echo "== installed"
(cd "$SITE" && find . -type f -not -name '*.pyc' | sort)
grep -v '^#' "$SITE/reducekit/_build_info.py"
readelf -d "$SITE/reducekit/libreducekit_torch.so" | grep -E "NEEDED|RPATH|RUNPATH"
ldd "$SITE/reducekit/libreducekit_torch.so" | grep "not found" || echo "ldd: every library found"

# From a folder outside the snapshot, so that only $SITE can provide reducekit.
mkdir -p /tmp/rk-outside && cd /tmp/rk-outside
export PYTHONDONTWRITEBYTECODE=1
echo "== import and ops from $SITE"
PYTHONPATH="$SITE" "$PY" - <<'EOF' || status=1
import torch
import reducekit
print("reducekit", reducekit.__version__, "from", reducekit.__file__)
assert reducekit.__file__.startswith("/tmp/rk-site/"), reducekit.__file__
for dtype in (torch.float32, torch.bfloat16):
    x = torch.randn(64, 1000, device="cuda", dtype=dtype)
    torch.testing.assert_close(reducekit.softmax(x, -1), torch.softmax(x, -1))
    torch.testing.assert_close(reducekit.sum(x, -1), torch.sum(x, -1), rtol=1e-2, atol=1e-2)
print("softmax and sum on cuda match torch (float32, bfloat16): ok")
EOF
echo "== import-time torch check (a copy whose record says torch 2.0 cu118; expect one ImportError line)"
mkdir -p /tmp/rk-other && cp -r "$SITE/reducekit" /tmp/rk-other/
sed -i 's/^torch_version = .*/torch_version = "2.0.0+cu118"/; s/^torch_cuda = .*/torch_cuda = "11.8"/' \
  /tmp/rk-other/reducekit/_build_info.py
line=$(PYTHONPATH=/tmp/rk-other "$PY" -c "import reducekit" 2>&1 | tail -1)
echo "$line"
[[ "$line" == "ImportError: reducekit was built against torch 2.0.0+cu118"* ]] || status=1

echo "== pytest against the installed package"
export REDUCEKIT_TEST_INSTALLED=1 PYTHONPATH="$SITE"
timeout 120 "$PY" -m pytest -p no:cacheprovider -rs "$SRC/tests/python/test_dispatch.py" >"$R/pytest_dispatch.log" 2>&1
rc=$?
echo "test_dispatch.py rc $rc: $(tail -1 "$R/pytest_dispatch.log")"
grep -m1 "reducekit GPU tests" "$R/pytest_dispatch.log"
# conftest skips every module when reducekit does not import, and pytest then exits 0 (its
# report header, printed without -q, says so).
grep -q "reducekit GPU tests: SKIPPED" "$R/pytest_dispatch.log" && rc=1
[ $rc -eq 0 ] || { status=1; tail -30 "$R/pytest_dispatch.log"; }
# Its child processes import reducekit through conftest's PACKAGE_PATH: the installed mode's path.
if [ $((SECONDS - T0)) -lt 260 ]; then
  timeout 80 "$PY" -m pytest -p no:cacheprovider -rs "$SRC/tests/python/test_bad_inputs.py" >"$R/pytest_bad_inputs.log" 2>&1
  rc=$?
  echo "test_bad_inputs.py rc $rc: $(tail -1 "$R/pytest_bad_inputs.log")"
  [ $rc -eq 0 ] || { status=1; tail -30 "$R/pytest_bad_inputs.log"; }
else
  echo "test_bad_inputs.py left out: $((SECONDS - T0)) s gone"
fi
exit $status
