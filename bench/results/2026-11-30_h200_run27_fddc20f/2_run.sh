#!/usr/bin/env bash
# Run 27: call 2 ran this carrying gpu-snapshot/ again, which replaced call 1's build (peers only,
# 2_peers_only/); call 4 ran it on call 3's build without carry (4_reductions/).
# Next GPU session, call 2 (right after run_next_1.sh, on its warm build: the wip series touch no
# reduction code, so this is main's): issue 3's closing benchmark, the whole grid of every
# reduction on every path in float32 and bfloat16 against torch eager and torch.compile (seed
# Triton's sum_all on the all path). Two groups so one timeout loses half at most.
cd "$(dirname "$0")" && source scripts/remote_call.sh
B="--reps 20 --warmup 5 --dtypes float32,bfloat16"
timeout 280 python3 bench/bench.py --out $R/col --ops sum_col,mean_col,amax_col,argmax_col,logsumexp_col,var_mean_col \
  $B > $R/col.log 2>&1; summary < $R/col.log; echo "columns done at $((SECONDS-T0)) s"
timeout 280 python3 bench/bench.py --out $R/row_all --ops sum_row,mean_row,amax_row,argmax_row,logsumexp_row,var_mean_row,sum_all,mean_all,amax_all,argmax_all,logsumexp_all,var_mean_all \
  $B > $R/row_all.log 2>&1; summary < $R/row_all.log; echo "rows and all done at $((SECONDS-T0)) s"
