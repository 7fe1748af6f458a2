#!/usr/bin/env bash
# Session 6 final call 1: build main, all C++ and Python tests side by side, racecheck of the fused norm backward.
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
cat > /tmp/race.py <<'PY'
import torch, reducekit
torch.manual_seed(0)
for dt, n, m in [(torch.bfloat16, 100, 40000), (torch.float32, 2048, 2200), (torch.float32, 8192, 300),
                 (torch.bfloat16, 8192, 300), (torch.float64, 1000, 2200)]:
    x = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dt, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=dt, requires_grad=True)
    y = reducekit.layer_norm(x, [n], w, b)
    y.backward(torch.randn_like(y))
    y = reducekit.rms_norm(x, [n], w)
    y.backward(torch.randn_like(y))
torch.cuda.synchronize()
print("race.py done")
PY
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 python3 /tmp/race.py > /tmp/race.log 2>&1
echo "racecheck fused norm backward: rc $? reports $(grep -cE '^========= (Race|Error)' /tmp/race.log)"; grep -E "race.py done|RACECHECK SUMMARY|ERROR SUMMARY" /tmp/race.log | head
echo "end at $((SECONDS-T0)) s"
