#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: build, check every implemented op against torch, then benchmark against the
# peers (torch eager, torch.compile, the seed Triton kernels), writing a table to stdout and
# JSON plus PNG plots to ${1:-bench/results/latest}. Needs a CUDA GPU with torch and triton.
source "$(dirname "$0")/common.sh"
OUT_DIR="${1:-$REPO/bench/results/latest}"
mkdir -p "$OUT_DIR"
have_gpu || { echo "no GPU found (nvidia-smi): the main job needs a CUDA GPU" >&2; exit 1; }
require_python_modules_on_gpu torch pytest hypothesis triton matplotlib
configure_and_build

echo "== checking every op against torch"
python3 -m pytest -q "$REPO/tests/python" -x
echo "== benchmark"
# By default a representative grid (each op's quick shapes) within about 4 minutes; --full
# (first of the benchmark arguments) measures the whole grid.
if [ "${2:-}" = "--full" ]; then
  python3 "$REPO/bench/bench.py" --out "$OUT_DIR" "${@:3}"
else
  python3 "$REPO/bench/bench.py" --out "$OUT_DIR" --quick --budget-s 240 "${@:2}"
fi
