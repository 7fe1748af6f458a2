#!/usr/bin/env bash
# Next GPU session, call 3, on the build to be landed (main after adopting call 1's winners; the
# snapshot recipe as for call 1, without git am): build, every test, then issue 4's closing
# benchmark, the norm groups with the fused ops in float32 and bfloat16 (float16 shares bfloat16's
# code; no time for it in one call), every peer in the same run.
cd "$(dirname "$0")" && source scripts/remote_call.sh
REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1
run_tests
B="--reps 20 --warmup 5 --dtypes float32,bfloat16"
timeout 100 python3 bench/bench.py --out $R/norm --ops layer_norm,rms_norm $B > $R/norm.log 2>&1; summary < $R/norm.log
timeout 100 python3 bench/bench.py --out $R/fused --ops add_layer_norm,add_rms_norm $B > $R/fused.log 2>&1
summary < $R/fused.log
timeout 110 python3 bench/bench.py --out $R/norm_bwd --ops layer_norm_backward,rms_norm_backward $B > $R/norm_bwd.log 2>&1
summary < $R/norm_bwd.log
echo "norms done at $((SECONDS-T0)) s"
