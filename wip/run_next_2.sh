#!/usr/bin/env bash
# Next GPU session, call 2, on the build to be landed (main after adopting call 1's winners; the
# snapshot recipe as for call 1, without git am): the benchmark groups issues 3 and 4 close on,
# every peer in the same run. Tests first if the code changed after call 1's tests.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r; mkdir -p $R
finish() { (cd $R && tar czf $OUT/all.tgz --exclude='*.png' .); echo "end at $((SECONDS-T0)) s"; }
trap finish EXIT
[ -f python/reducekit/libreducekit_torch.so ] || { REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1; }
B="--reps 20 --warmup 5"
S() { grep -E "^(SUMMARY|copy ceiling)" | grep -v "graph replay"; }
timeout 200 python3 bench/bench.py --out $R/norm --ops layer_norm,rms_norm,add_layer_norm,add_rms_norm \
  --dtypes float32,bfloat16,float16 $B > $R/norm.log 2>&1; S < $R/norm.log
timeout 170 python3 bench/bench.py --out $R/norm_bwd --ops layer_norm_backward,rms_norm_backward \
  --dtypes float32,bfloat16,float16 $B > $R/norm_bwd.log 2>&1; S < $R/norm_bwd.log
echo "norms done at $((SECONDS-T0)) s"
