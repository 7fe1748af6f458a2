#!/usr/bin/env bash
# Next GPU session, call 1 (wip/README.md's plan). Snapshot root = a branch of main with
# wip/reread-small applied, COMMIT written. Builds, runs every test (RereadRows now at both tile
# sizes), then sweeps the row ops: the default, small re-read tiles where the default re-reads
# (small), and small tiles for every block row above one vector (small_all), with torch eager
# and torch.compile beside. Everything is tarred into $OUT/all.tgz.
cd "$(dirname "$0")" && source scripts/remote_call.sh
mkdir -p "$R/rows"
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
run_tests
timeout 280 python3 bench/sweep.py --out $R/rows --peers "torch,torch.compile" \
  --ops softmax,layer_norm,rms_norm,layer_norm_backward,rms_norm_backward --dtypes float32,bfloat16 \
  --shapes 4096x2048,4096x4096,4096x8192,4096x12800,4096x32768,1024x65536,256x262144,32768x4096 \
  --reps 20 --warmup 5 --variant "base:" --variant "small:REDUCEKIT_TUNE_REREAD_SMALL_TILES=1" \
  --variant "small_all:REDUCEKIT_TUNE_REREAD_SMALL_TILES=1 REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=4" > $R/rows/sweep.txt 2>&1
echo "row sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/rows/sweep.txt
