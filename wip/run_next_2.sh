#!/usr/bin/env bash
# Next GPU session, call 2, on the build to be landed (main after adopting call 1's winners; the
# snapshot recipe as for call 1, without git am): issue 4's closing benchmark, the norm groups
# with the fused ops in three dtypes, every peer in the same run. It builds when the snapshot has
# no library; run the tests first (run_tests) if the code changed after call 1's.
cd "$(dirname "$0")" && source scripts/remote_call.sh
[ -f python/reducekit/libreducekit_torch.so ] || { REDUCEKIT_STAGES=build bash scripts/gpu_run.sh $R || exit 1; }
B="--reps 20 --warmup 5"
timeout 200 python3 bench/bench.py --out $R/norm --ops layer_norm,rms_norm,add_layer_norm,add_rms_norm \
  --dtypes float32,bfloat16,float16 $B > $R/norm.log 2>&1; summary < $R/norm.log
timeout 170 python3 bench/bench.py --out $R/norm_bwd --ops layer_norm_backward,rms_norm_backward \
  --dtypes float32,bfloat16,float16 $B > $R/norm_bwd.log 2>&1; summary < $R/norm_bwd.log
echo "norms done at $((SECONDS-T0)) s"
