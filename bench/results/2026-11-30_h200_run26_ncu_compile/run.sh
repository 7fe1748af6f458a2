#!/usr/bin/env bash
# Run 26: ncu of torch.compile's norm forward kernels where they lead ours most (run 25:
# layer_norm fp32 4096x32768 3753 vs 2560, 4096x8192 3777 vs 3402; rms_norm fp32 / bf16
# 4096x32768 4172 / 4018 vs 3539 / 2995), with inductor's generated code. No build: peers only.
# From the repo root of a snapshot; everything into $OUT/all.tgz.
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
finish() { (cd $R && tar czf $OUT/all.tgz .); }
trap finish EXIT
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
prof() {  # op dtype shapes
  local inc=() s
  for s in ${3//,/ }; do inc+=(--nvtx-include "torch.compile $1 $2 $s/"); done
  TORCH_LOGS=output_code timeout 80 ncu --clock-control none --nvtx "${inc[@]}" $S \
    python3 bench/profile_rows.py --op $1 --dtypes $2 --shapes $3 --impls torch.compile \
    > $R/ncu_$1_$2.txt 2> $R/code_$1_$2.txt
  echo "$1 $2 rc $?"; grep -E "torch.compile|Duration|Registers Per|Block Size|Grid Size|Achieved Occupancy|DRAM Throughput|L2 Hit|Waves" $R/ncu_$1_$2.txt | head -24
}
prof layer_norm float32 4096x32768,4096x8192
prof rms_norm bfloat16 4096x32768

