#!/usr/bin/env bash
# Session 7 follow-up (warm, same build): host time a call; column grid; quick grid of the other
# reductions; sweeps for the next session (2-CTA clusters of 32-value tiles for norms, split cluster rows).
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
timeout 40 python3 bench/host_overhead.py --calls 20000 --out $OUT/host
echo "host done at $((SECONDS-T0)) s"
B="--no-compile --reps 20 --warmup 5 --dtypes float32,bfloat16"
timeout 100 python3 bench/bench.py --out $OUT/col --impls reducekit,torch --ops sum_col,mean_col,amax_col,argmax_col,var_mean_col,logsumexp_col $B 2>&1 | grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"
echo "col done at $((SECONDS-T0)) s"
timeout 60 python3 bench/bench.py --out $OUT/quick --quick --impls reducekit,torch,seed-triton --ops sum_row,mean_row,amax_row,argmax_row,var_mean_row,logsumexp_row,sum_all,mean_all,amax_all,argmax_all,var_mean_all,add_layer_norm,add_rms_norm $B 2>&1 | grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"
echo "quick done at $((SECONDS-T0)) s"
mkdir -p $OUT/sweep; timeout 100 python3 bench/sweep.py --out $OUT/sweep --peers "torch,seed-triton" --ops softmax,log_softmax,layer_norm,rms_norm --dtypes bfloat16,float32 --shapes 4096x32768,256x262144,1024x65536 --reps 20 --warmup 5 --variant "main:" --variant "mt32:REDUCEKIT_TUNE_MAX_TILE_VALUES=32" --variant "splitcl:REDUCEKIT_TUNE_SPLIT_CLUSTER_ROWS=1" > $OUT/sweep/sweep.txt 2>&1
echo "sweep rc $? at $((SECONDS-T0)) s"
