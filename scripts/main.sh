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

echo "== checking every op against torch: the README's test command (C++ and Python suites at once)"
bash "$REPO/scripts/test.sh"
echo "== benchmark"
# The package test.sh installed (into $SITE), as the tests import it.
export REDUCEKIT_PYTHON_PATH="$SITE"
# By default a representative grid within about 2.5 minutes (the main job within 5
# minutes after the build, the tests about 2 of them): each op's quick shapes in float32 and
# bfloat16, shape by shape across the ops (bench.py --budget-s), so that the budget leaves out
# later shapes rather than later ops; --full (first of the benchmark arguments) measures the
# whole grid in every dtype.
if [ "${2:-}" = "--full" ]; then
  python3 "$REPO/bench/bench.py" --out "$OUT_DIR" "${@:3}"
else
  python3 "$REPO/bench/bench.py" --out "$OUT_DIR" --quick --dtypes fp32,bf16 --budget-s 120 "${@:2}"
fi
