#!/usr/bin/env bash
# Session 7 final call: build main, all C++ and Python tests side by side, memcheck of the column
# tests (short-column layout), benchmark groups softmax and norm (fp32 + bf16, torch eager + seed).
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $OUT || exit 1
echo "build done at $((SECONDS-T0)) s"
(timeout 330 build/reducekit_tests --gtest_brief=1 > $OUT/cpp_tests.log 2>&1; echo $? > /tmp/cpp_rc) &
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES=py timeout 330 bash scripts/gpu_run.sh $OUT
wait
echo "cpp rc $(cat /tmp/cpp_rc)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran|Failure" $OUT/cpp_tests.log | head -40
echo "tests done at $((SECONDS-T0)) s"
timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 build/reducekit_tests --gtest_filter='ReduceGpu.Columns*' --gtest_brief=1 > /tmp/mc.log 2>&1
echo "memcheck ReduceGpu.Columns*: rc $? reports $(grep -cE '^========= (Invalid|Error)' /tmp/mc.log)"; grep -E "PASSED|FAILED|ERROR SUMMARY" /tmp/mc.log | head -5
echo "memcheck done at $((SECONDS-T0)) s"
B="--impls reducekit,torch,seed-triton --no-compile --reps 20 --warmup 5 --dtypes float32,bfloat16"
python3 bench/bench.py --out $OUT/softmax --ops softmax,log_softmax $B 2>&1 | grep -E "^(SUMMARY|copy ceiling)"
python3 bench/bench.py --out $OUT/norm --ops layer_norm,rms_norm,layer_norm_backward,rms_norm_backward $B 2>&1 | grep -E "^(SUMMARY|copy ceiling)"
echo "end at $((SECONDS-T0)) s"
