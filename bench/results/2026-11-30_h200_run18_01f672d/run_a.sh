#!/usr/bin/env bash
# Session 6 call A: build gpu/s6 (main + block16 + block-cluster + norm-bwd-rows), all tests, racecheck, block16 sweep.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $OUT || exit 1
echo "build done at $((SECONDS-T0)) s"
(timeout 300 build/reducekit_tests --gtest_brief=1 > $OUT/cpp_tests.log 2>&1; echo $? > /tmp/cpp_rc) &
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES=py timeout 300 bash scripts/gpu_run.sh $OUT
wait
echo "cpp rc $(cat /tmp/cpp_rc)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran|Failure" $OUT/cpp_tests.log | head -40
echo "tests done at $((SECONDS-T0)) s"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 build/reducekit_tests --gtest_filter='*RowLanes*' --gtest_brief=1 > /tmp/race.log 2>&1
echo "racecheck RowLanes rc $? reports $(grep -cE '^========= (Race|Error)' /tmp/race.log)"; tail -3 /tmp/race.log
echo "race done at $((SECONDS-T0)) s"
if [ $((SECONDS-T0)) -lt 470 ]; then
  timeout $((580-(SECONDS-T0))) python3 bench/sweep.py --out /tmp/b16 --peers "torch,seed-triton" --ops softmax --dtypes bfloat16,float32 \
    --reps 20 --warmup 5 --variant "e32:" --variant "e16:REDUCEKIT_TUNE_BLOCK_ELEMS=16" 2>&1 | tee $OUT/sweep_b16_softmax.txt
fi
echo "end at $((SECONDS-T0)) s"
