#!/usr/bin/env bash
# Next GPU session, second call, on run_next.sh's build (`run` without `carry`, which would replace
# it): column reductions of small inner extent at shorter segments (more CTAs) than the default's
# 256-row floor, in plain and CUDA-graph timing. Run 27's graph replay put torch.compile up to 5x
# ahead of us at 4096 x 128..2048 (sum_col float32 4096x128: 690 against 299 GB/s), where our
# plan gives 16 CTAs a 4096-row column (16 segments of 256 rows) and 64 a 65536-row one (at most
# 64 segments): `seg64x256` lifts both bounds (256 CTAs there). Then wip/column-wide's layout
# (applied to the snapshot) against the default at large inner extents, where torch and
# torch.compile lead by 4-36% (run 27).
cd "$(dirname "$0")" && source scripts/remote_call.sh
mkdir -p "$R/colseg" "$R/colwide"
timeout 260 python3 bench/sweep.py --out $R/colseg --reps 20 --warmup 5 --peers torch,torch.compile \
  --ops sum_col,var_mean_col,logsumexp_col --dtypes float32,bfloat16 \
  --shapes 4096x128,4096x512,4096x1024,4096x2048,65536x64 --variant "base:" \
  --variant "seg128:REDUCEKIT_TUNE_COL_MIN_SEGMENT_ROWS=128" --variant "seg64:REDUCEKIT_TUNE_COL_MIN_SEGMENT_ROWS=64" \
  --variant "seg64x256:REDUCEKIT_TUNE_COL_MIN_SEGMENT_ROWS=64 REDUCEKIT_TUNE_COL_MAX_SEGMENTS=256" \
  > $R/colseg/sweep.txt 2>&1
echo "column sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/colseg/sweep.txt
timeout 200 python3 bench/sweep.py --out $R/colwide --reps 20 --warmup 5 --peers torch,torch.compile \
  --ops sum_col,amax_col,logsumexp_col --dtypes float32,bfloat16 \
  --shapes 4096x2048,4096x8192,4096x32768,256x262144,32768x4096 --variant "base:" \
  --variant "wide:REDUCEKIT_TUNE_COL_WIDE_FROM_COLUMNS=1" > $R/colwide/sweep.txt 2>&1
echo "wide sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/colwide/sweep.txt
