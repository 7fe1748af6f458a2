#!/usr/bin/env bash
# Next GPU session, one call on main with wip/column-wide applied (wip/README.md): build,
# every test, then three same-run sweeps with torch.compile beside, each a question LOG.md's
# "What to try next (after run 27)" asks: 16-word re-read tiles against the default's one-vector
# tiles at long rows (`tile16`); one-CTA norm rows re-read (`rr32`, `rr16`, small tiles by the
# default's row-length rule); float32 split rows for the norm forwards at 16 x 2^20 (`split4`).
cd "$(dirname "$0")" && source scripts/remote_call.sh
mkdir -p "$R/tiles" "$R/onecta" "$R/split32"
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
echo "build done at $((SECONDS-T0)) s"
run_tests
S="python3 bench/sweep.py --reps 20 --warmup 5 --peers torch.compile"
timeout 110 $S --out $R/tiles --ops softmax,layer_norm,rms_norm --dtypes float32,bfloat16 \
  --shapes 256x262144,1024x65536,4096x32768 \
  --variant "base:" --variant "tile16:REDUCEKIT_TUNE_REREAD_SMALL_TILES_FROM_BYTES=1073741824" > $R/tiles/sweep.txt 2>&1
echo "tiles sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/tiles/sweep.txt
timeout 170 $S --out $R/onecta --ops rms_norm,add_rms_norm,add_layer_norm --dtypes float32,bfloat16 \
  --shapes 4096x8192,4096x12800,4096x32768,32768x4096 --variant "base:" \
  --variant "rr32:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=32" --variant "rr16:REDUCEKIT_TUNE_REREAD_ABOVE_WORDS=16" \
  > $R/onecta/sweep.txt 2>&1
echo "one-CTA sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/onecta/sweep.txt
timeout 60 $S --out $R/split32 --ops layer_norm,rms_norm,add_layer_norm,add_rms_norm --dtypes float32 \
  --shapes 16x1048576 --variant "base:" --variant "split4:REDUCEKIT_TUNE_SPLIT_MAX_ELEM_BYTES=4" > $R/split32/sweep.txt 2>&1
echo "split sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/split32/sweep.txt
