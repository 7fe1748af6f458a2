#!/usr/bin/env bash
# Next GPU session, call 2: right after run_next_1.sh, on the warm machine and the same build
# (`cd <snapshot> && bash run_next_2.sh`): the row ops with re-read rows against the default,
# and one-pass statistics for layer_norm's one-CTA rows, torch eager / torch.compile / seed
# Triton measured once. Everything is tarred into $OUT/all.tgz.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R/rows
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
timeout 400 python3 bench/sweep.py --out $R/rows --peers "torch,torch.compile,seed-triton" \
  --ops softmax,layer_norm,rms_norm,layer_norm_backward --dtypes float32,bfloat16 \
  --shapes 4096x4096,4096x8192,4096x12800,4096x32768,1024x65536,256x262144,32768x4096 --reps 20 --warmup 5 \
  --variant "base:" --variant "rr64:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=64" \
  --variant "rr16:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=16" --variant "tp0:REDUCEKIT_TUNE_TWO_PHASE=0" > $R/rows/sweep.txt 2>&1
echo "row sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/rows/sweep.txt
