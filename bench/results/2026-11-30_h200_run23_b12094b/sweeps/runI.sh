#!/usr/bin/env bash
# Session 8 call 2 (warm, same build): sweeps. carveout for norms + ncu L1; split cluster rows by
# cluster size; column segments for small inner extents; layer_norm bf16 at 64 values without ring.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
S="--reps 20 --warmup 5"
mkdir -p $OUT/carve $OUT/splitcl $OUT/colseg $OUT/ln16
timeout 120 python3 bench/sweep.py --out $OUT/carve --peers "torch,seed-triton" --ops layer_norm,rms_norm --dtypes float32,bfloat16 --shapes 4096x32768,32768x4096,1024x65536 $S --variant "base:" --variant "co0:REDUCEKIT_TUNE_BLOCK_CARVEOUT=0" --variant "co100:REDUCEKIT_TUNE_BLOCK_CARVEOUT=100" > $OUT/carve/sweep.txt 2>&1
echo "carve rc $? at $((SECONDS-T0)) s"
M="l1tex__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,gpu__time_duration.sum,launch__registers_per_thread,launch__cluster_dim_x"
for co in default 0; do
  if [ $co = 0 ]; then export REDUCEKIT_TUNE_BLOCK_CARVEOUT=0; fi
  ( timeout 45 ncu --clock-control none --metrics $M -k regex:"row_|norm" python3 bench/profile_rows.py --op layer_norm --shapes 4096x32768,32768x4096 --dtypes float32 --impls reducekit,seed-triton ) > $OUT/carve/ncu_ln_co$co.txt 2>&1
done
unset REDUCEKIT_TUNE_BLOCK_CARVEOUT
echo "ncu done at $((SECONDS-T0)) s"
timeout 120 python3 bench/sweep.py --out $OUT/splitcl --peers "torch,seed-triton" --ops softmax,log_softmax --dtypes bfloat16 --shapes 1024x65536,512x131072,384x196608,256x262144 $S --variant "base:" --variant "splitcl:REDUCEKIT_TUNE_SPLIT_CLUSTER_ROWS=1" > $OUT/splitcl/sweep.txt 2>&1
echo "splitcl rc $? at $((SECONDS-T0)) s"
timeout 120 python3 bench/sweep.py --out $OUT/colseg --peers "torch" --ops sum_col,amax_col,argmax_col,var_mean_col --dtypes float32,bfloat16 --shapes 4096x128,4096x256,4096x512,4096x1024,65536x64 $S --variant "base:" --variant "seg64:REDUCEKIT_TUNE_COL_MIN_SEGMENT_ROWS=64" --variant "seg128:REDUCEKIT_TUNE_COL_MIN_SEGMENT_ROWS=128" > $OUT/colseg/sweep.txt 2>&1
echo "colseg rc $? at $((SECONDS-T0)) s"
timeout 90 python3 bench/sweep.py --out $OUT/ln16 --peers "torch,seed-triton" --ops layer_norm --dtypes bfloat16 --shapes 4096x8192,4096x12800,4096x32768,32768x4096 $S --variant "base:" --variant "e64:REDUCEKIT_TUNE_BLOCK_ELEMS=64 REDUCEKIT_TUNE_RING=0" --variant "e32r0:REDUCEKIT_TUNE_BLOCK_ELEMS=32 REDUCEKIT_TUNE_RING=0" > $OUT/ln16/sweep.txt 2>&1
echo "ln16 rc $? at $((SECONDS-T0)) s"
