#!/usr/bin/env bash
# Session 6 call B: build the launch-bounds experiment (torch library only), sweep it, ncu three points.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DREDUCEKIT_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /tmp/cfg.log 2>&1 || { tail -30 /tmp/cfg.log; exit 1; }
cmake --build build --target reducekit_torch -j 16 > /tmp/build.log 2>&1 || { grep -E "error" /tmp/build.log | head -30; tail -30 /tmp/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
B="--reps 20 --warmup 5"
timeout 200 python3 bench/sweep.py --out /tmp/sw --peers "torch,seed-triton" --ops softmax,log_softmax,layer_norm,rms_norm --dtypes bfloat16,float32 $B --variant "bnd:" 2>&1 | tee $OUT/sweep_bounds.txt | tail -3
echo "sweep $((SECONDS-T0)) s"
timeout 120 python3 bench/sweep.py --out /tmp/swb --peers "torch" --ops layer_norm_backward,rms_norm_backward --dtypes bfloat16,float32 --shapes 4096x8192,4096x12800,4096x32768,256x262144,16x1048576 $B --variant "fused:" --variant "c1:REDUCEKIT_TUNE_NORM_BWD_MAX_CLUSTER=1" 2>&1 | tee $OUT/sweep_bwd_cluster.txt | tail -3
echo "sweep bwd $((SECONDS-T0)) s"
NCU="ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
( REDUCEKIT_TUNE_BLOCK_ELEMS=16 timeout 60 $NCU -k regex:"row_|softmax" python3 bench/profile_rows.py --op softmax --shapes 4096x8192 --dtypes bfloat16 --impls reducekit,seed-triton ) > $OUT/ncu_softmax_bf16_e16.txt 2>&1
( timeout 60 $NCU -k regex:"row_|softmax" python3 bench/profile_rows.py --op softmax --shapes 4096x8192 --dtypes bfloat16 --impls reducekit ) > $OUT/ncu_softmax_bf16_e32.txt 2>&1
( timeout 60 $NCU -k regex:"reduce" python3 bench/profile_rows.py --op sum_col --shapes 4096x32768 --dtypes float32 --impls reducekit,torch ) > $OUT/ncu_sum_col.txt 2>&1
( timeout 60 $NCU -k regex:"row_|norm" python3 bench/profile_rows.py --op layer_norm --shapes 4096x12800 --dtypes bfloat16 --impls reducekit,seed-triton ) > $OUT/ncu_ln_bf16.txt 2>&1
echo "end $((SECONDS-T0)) s"
