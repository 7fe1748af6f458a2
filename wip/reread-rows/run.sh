#!/usr/bin/env bash
# GPU call for wip/reread-rows. Put it at the root of a snapshot of a branch with the series
# applied (see wip/README.md) and run `bash <snapshot>/run.sh`: build, all tests (C++ RereadRows
# tests set the knob), then the sweep of the knob against the default (and of one-pass statistics,
# TWO_PHASE=0, for the one-CTA layer_norm rows torch.compile leads by 11-14%), with torch eager,
# torch.compile and seed Triton measured once. Everything lands in $OUT/all.tgz (a remote run
# brings back at most 8 files).
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R/sweep
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 \
  REDUCEKIT_PY_PARALLEL=1 timeout 200 bash scripts/gpu_run.sh $R
echo "tests rc $? at $((SECONDS-T0)) s"
timeout 300 python3 bench/sweep.py --out $R/sweep --peers "torch,torch.compile,seed-triton" \
  --ops softmax,layer_norm,rms_norm,layer_norm_backward --dtypes float32,bfloat16 \
  --shapes 4096x4096,4096x8192,4096x12800,4096x32768,1024x65536,256x262144,32768x4096 --reps 20 --warmup 5 \
  --variant "base:" --variant "rr64:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=64" \
  --variant "rr16:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=16" --variant "tp0:REDUCEKIT_TUNE_TWO_PHASE=0" > $R/sweep/sweep.txt 2>&1
echo "sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/sweep/sweep.txt
