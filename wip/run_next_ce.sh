#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Next GPU call on branch wip-cross-entropy (one call, ~8 min): build, the cross-entropy tests
# (C++ against the oracle, Python against torch), the layer_norm inf/NaN test written after run
# 35, every other test, then the cross-entropy benchmark against torch eager.
cd "$(dirname "$0")/.." && source scripts/remote_call.sh
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
timeout 120 build/reducekit_tests --gtest_brief=1 --gtest_filter='CrossEntropy*:ReferenceCrossEntropy*' > $R/ce_cpp.log 2>&1
echo "C++ cross-entropy rc $?"; grep -E "FAILED|PASSED|Failure|tests from" $R/ce_cpp.log | head -30
timeout 120 python3 -m pytest -q tests/python/test_cross_entropy.py "tests/python/test_norm.py::test_forward_non_finite_rows" \
  -x --tb=short > $R/ce_py.log 2>&1
echo "Python rc $?"; tail -30 $R/ce_py.log
run_tests
timeout 120 python3 bench/bench.py --ops cross_entropy,cross_entropy_training --dtypes bfloat16,float32 --quick \
  --impls reducekit,torch --no-compile --graph none --reps 20 --warmup 5 --no-plot --out $R/ce_bench > $R/ce_bench.txt 2>&1
echo "bench rc $?"; grep -E "^(SUMMARY|copy)" $R/ce_bench/bench.log
