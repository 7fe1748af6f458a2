#!/usr/bin/env bash
# Next GPU session, call 1 (of wip/README.md's plan). Snapshot root = a branch of main with
# wip/reread-rows and wip/col-occupancy applied (git am, in that order), with main-src/ = git
# archive of main beside it and COMMIT written. Builds the branch (all targets) and main's torch
# library side by side, runs every test on the branch (its column kernels at the new register
# bounds, its RereadRows tests with the knob set), then sweeps the column ops, branch against
# main. Everything is tarred into $OUT/all.tgz.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R/col
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
P=$(command -v python3)
( cmake -S main-src -B main-src/build -DCMAKE_BUILD_TYPE=Release -DREDUCEKIT_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$P \
    > $R/main_configure.log 2>&1 && cmake --build main-src/build --target reducekit_torch -j 6 > $R/main_build.log 2>&1
  echo "main torch library rc $? at $((SECONDS-T0)) s" ) &
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
wait
echo "builds done at $((SECONDS-T0)) s"
PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 \
  REDUCEKIT_PY_PARALLEL=1 timeout 200 bash scripts/gpu_run.sh $R
echo "tests rc $? at $((SECONDS-T0)) s"
M=$PWD/main-src/python/reducekit/libreducekit_torch.so
timeout 150 python3 bench/sweep.py --out $R/col --peers "torch,torch.compile" \
  --ops sum_col,mean_col,amax_col,var_mean_col --dtypes float32,bfloat16 \
  --shapes 4096x1024,4096x8192,4096x32768,256x262144,32768x4096 --reps 20 --warmup 5 \
  --variant "branch:" --variant "main:REDUCEKIT_TORCH_LIBRARY=$M" > $R/col/sweep.txt 2>&1
echo "column sweep rc $? at $((SECONDS-T0)) s"; grep "|" $R/col/sweep.txt
