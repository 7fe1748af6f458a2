#!/usr/bin/env bash
# Session 7 call A: torch libraries of exp/s7 and main built side by side, then the row-op sweep.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
P=$(command -v python3)
build() { cmake -S $1 -B $1/build -DCMAKE_BUILD_TYPE=Release -DREDUCEKIT_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$P > /tmp/cfg_$2.log 2>&1 && cmake --build $1/build --target reducekit_torch -j 8 > /tmp/build_$2.log 2>&1; echo "$2 rc $? at $((SECONDS-T0)) s"; }
build . exp & build main-src main & wait
M=$PWD/main-src/python/reducekit/libreducekit_torch.so
B="--reps 20 --warmup 5"
mkdir -p $OUT/rows
timeout 280 python3 bench/sweep.py --out $OUT/rows --peers "torch,seed-triton" --ops softmax,log_softmax,layer_norm,rms_norm --dtypes bfloat16,float32 $B --variant "exp:" --variant "e16:REDUCEKIT_TUNE_BLOCK_ELEMS=16" --variant "main:REDUCEKIT_TORCH_LIBRARY=$M" > $OUT/rows/sweep.txt 2>&1
echo "rows sweep rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/rows/sweep.txt
