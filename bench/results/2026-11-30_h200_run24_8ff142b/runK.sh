#!/usr/bin/env bash
# Session 8 final call: build main (the code of run 23's tested build b12094b), then the softmax
# group in float32, bfloat16 and float16 and the norm groups in float32 and bfloat16, each against
# torch eager, torch.compile and the seed Triton kernels. Everything is tarred into $OUT/all.tgz.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
B="--impls reducekit,torch,torch.compile,seed-triton --reps 20 --warmup 5"
S() { grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"; }
timeout 180 python3 bench/bench.py --out $R/softmax --ops softmax,log_softmax --dtypes float32,bfloat16,float16 $B 2>&1 | S
echo "softmax done at $((SECONDS-T0)) s"
timeout 110 python3 bench/bench.py --out $R/norm_fwd --ops layer_norm,rms_norm --dtypes float32,bfloat16 $B 2>&1 | S
echo "norm forward done at $((SECONDS-T0)) s"
timeout 150 python3 bench/bench.py --out $R/norm_bwd --ops layer_norm_backward,rms_norm_backward --dtypes float32,bfloat16 $B 2>&1 | S
echo "norm backward done at $((SECONDS-T0)) s"
