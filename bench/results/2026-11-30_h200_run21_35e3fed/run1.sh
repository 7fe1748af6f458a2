#!/usr/bin/env bash
# Session 7 call 1: build exp/s7 (main + wip one-row-ctas + column-lanes), C++ and Python tests side by side,
# main's torch library built beside it (for same-run comparisons), racecheck of the reduced suite.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $OUT || exit 1
echo "build done at $((SECONDS-T0)) s"
( cd main-src && nice -n 10 cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DREDUCEKIT_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /tmp/cfgm.log 2>&1 && nice -n 10 cmake --build build --target reducekit_torch -j 8 > /tmp/buildm.log 2>&1; echo "main torch lib rc $? at $((SECONDS-T0)) s" > /tmp/mainbuild ) &
bpid=$!
(timeout 360 build/reducekit_tests --gtest_brief=1 > $OUT/cpp_tests.log 2>&1; echo $? > /tmp/cpp_rc) &
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES=py timeout 360 bash scripts/gpu_run.sh $OUT
wait
echo "cpp rc $(cat /tmp/cpp_rc)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran|Failure" $OUT/cpp_tests.log | head -40
cat /tmp/mainbuild; ls -la main-src/python/reducekit/*.so 2>&1 | tail -1
echo "end at $((SECONDS-T0)) s"
