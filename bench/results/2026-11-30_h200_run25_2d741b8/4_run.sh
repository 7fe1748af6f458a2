#!/usr/bin/env bash
# Run 25, call C: the re-read default held to rows of <= 1 MiB; build, every test, norm forward
# and backward groups (fp32, bf16) against torch eager, torch.compile and seed Triton, then a
# same-run sweep of the long rows against the knob off (REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=0).
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 \
  REDUCEKIT_PY_PARALLEL=1 timeout 150 bash scripts/gpu_run.sh $R
echo "tests rc $? at $((SECONDS-T0)) s"
B="--impls reducekit,torch,torch.compile,seed-triton --reps 20 --warmup 5"
S() { grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"; }
timeout 110 python3 bench/bench.py --out $R/norm_fwd --ops layer_norm,rms_norm --dtypes float32,bfloat16 $B > $R/norm_fwd.log 2>&1
S < $R/norm_fwd.log; echo "norm forward done at $((SECONDS-T0)) s"
timeout 130 python3 bench/bench.py --out $R/norm_bwd --ops layer_norm_backward,rms_norm_backward --dtypes float32,bfloat16 $B > $R/norm_bwd.log 2>&1
S < $R/norm_bwd.log; echo "norm backward done at $((SECONDS-T0)) s"
timeout 70 python3 bench/sweep.py --out $R/sweep --peers "torch" \
  --ops softmax,rms_norm_backward,layer_norm --dtypes bfloat16,float32 \
  --shapes 1024x65536,256x262144,16x1048576 --reps 20 --warmup 5 \
  --variant "default:" --variant "off:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=0" > $R/sweep.txt 2>&1
echo "sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/sweep.txt
