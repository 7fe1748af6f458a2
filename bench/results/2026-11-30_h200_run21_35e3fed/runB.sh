#!/usr/bin/env bash
# Session 7 call B (warm after A): column ops exp vs main vs torch; norm backward exp vs main.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
M=$PWD/main-src/python/reducekit/libreducekit_torch.so
B="--reps 20 --warmup 5"
mkdir -p $OUT/col $OUT/bwd
timeout 220 python3 bench/sweep.py --out $OUT/col --peers "torch" --ops sum_col,mean_col,amax_col,argmax_col,var_mean_col,logsumexp_col --dtypes float32,bfloat16 $B --variant "exp:" --variant "main:REDUCEKIT_TORCH_LIBRARY=$M" > $OUT/col/sweep.txt 2>&1
echo "col sweep rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/col/sweep.txt
timeout 150 python3 bench/sweep.py --out $OUT/bwd --peers "torch" --ops layer_norm_backward,rms_norm_backward --dtypes bfloat16,float32 $B --variant "exp:" --variant "main:REDUCEKIT_TORCH_LIBRARY=$M" > $OUT/bwd/sweep.txt 2>&1
echo "bwd sweep rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/bwd/sweep.txt
