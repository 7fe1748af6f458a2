#!/usr/bin/env bash
# Session 8 call 3: build gpu/s9 (fixed), tests (4 C++ shards beside the Python files at once),
# host time a call, benchmark groups softmax and norm (fp32+bf16, torch eager + seed), column grid.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); cp $R/*.log $OUT/ 2>/dev/null; echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 REDUCEKIT_PY_PARALLEL=1 timeout 300 bash scripts/gpu_run.sh $R
echo "tests rc $? done at $((SECONDS-T0)) s"
grep -B2 -A12 "^E  \|Error" $R/py_tests.log | head -60
timeout 40 python3 bench/host_overhead.py --calls 20000 --out $R/host
echo "host done at $((SECONDS-T0)) s"
B="--impls reducekit,torch,seed-triton --no-compile --reps 20 --warmup 5 --dtypes float32,bfloat16"
timeout 120 python3 bench/bench.py --out $R/softmax --ops softmax,log_softmax $B 2>&1 | grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"
echo "softmax done at $((SECONDS-T0)) s"
timeout 150 python3 bench/bench.py --out $R/norm --ops layer_norm,rms_norm,layer_norm_backward,rms_norm_backward $B 2>&1 | grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"
echo "norm done at $((SECONDS-T0)) s"
