#!/usr/bin/env bash
# Run 25, call A: build the re-read default (reread_above_words_for), every test, then the norm
# forward group (fp32, bf16) against torch eager, torch.compile and seed Triton. All into $OUT/all.tgz.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 \
  REDUCEKIT_PY_PARALLEL=1 timeout 200 bash scripts/gpu_run.sh $R
echo "tests rc $? at $((SECONDS-T0)) s"
B="--impls reducekit,torch,torch.compile,seed-triton --reps 20 --warmup 5"
S() { grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"; }
timeout 130 python3 bench/bench.py --out $R/norm_fwd --ops layer_norm,rms_norm --dtypes float32,bfloat16 $B > $R/norm_fwd.log 2>&1
S < $R/norm_fwd.log; echo "norm forward done at $((SECONDS-T0)) s"
