#!/usr/bin/env bash
# Next GPU session, call 1 (wip/README.md's plan). Snapshot root = a branch of main with
# wip/reread-small and wip/norm-split applied, COMMIT written. Builds, runs every test
# (RereadRows at both tile sizes, NormGpu.SplitRows), then two same-run sweeps with torch eager
# and torch.compile beside: norm forwards with and without split rows (`nosplit` turns split rows
# off), and the row ops at the default, small re-read tiles where the default re-reads (small),
# and small tiles for every block row above one vector (small_all). All into $OUT/all.tgz.
cd "$(dirname "$0")" && source scripts/remote_call.sh
mkdir -p "$R/split" "$R/rows"
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
run_tests
timeout 90 python3 bench/sweep.py --out $R/split --peers "torch.compile" \
  --ops layer_norm,rms_norm,add_layer_norm,add_rms_norm --dtypes bfloat16 \
  --shapes 16x1048576,256x262144 --reps 20 --warmup 5 \
  --variant "split:" --variant "nosplit:REDUCEKIT_TUNE_SPLIT_MAX_ELEM_BYTES=0" > $R/split/sweep.txt 2>&1
echo "split sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/split/sweep.txt
timeout 200 python3 bench/sweep.py --out $R/rows --peers "torch,torch.compile" \
  --ops softmax,layer_norm,rms_norm,rms_norm_backward --dtypes float32,bfloat16 \
  --shapes 4096x4096,4096x8192,4096x12800,4096x32768,1024x65536,32768x4096 \
  --reps 20 --warmup 5 --variant "base:" --variant "small:REDUCEKIT_TUNE_REREAD_SMALL_TILES=1" \
  --variant "small_all:REDUCEKIT_TUNE_REREAD_SMALL_TILES=1 REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=4" > $R/rows/sweep.txt 2>&1
echo "row sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/rows/sweep.txt
