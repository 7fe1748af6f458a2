// SPDX-License-Identifier: Apache-2.0
// Between the op layer (reduce.cpp: checks and planning) and the kernel instantiations, which are
// spread over one .cu file per statistic so they compile in parallel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/reduce_args.hpp"
#include "plan/reduce_config.hpp"
#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

struct ReduceLaunch {
  kernels::ReduceArgs args;
  ReduceConfig config;
  int64_t out_numel = 0;
  DType x_type = DType::kFloat32;
  bool double_accumulate = false;  // float64 accumulation of a narrower x (sum/mean with dtype=float64)
};

Status launch_sum(const ReduceLaunch& l, cudaStream_t stream);  // sum and mean (args.outs.mode)
Status launch_prod(const ReduceLaunch& l, cudaStream_t stream);
Status launch_amax(const ReduceLaunch& l, cudaStream_t stream);
Status launch_amin(const ReduceLaunch& l, cudaStream_t stream);
Status launch_argmax(const ReduceLaunch& l, cudaStream_t stream);
Status launch_argmin(const ReduceLaunch& l, cudaStream_t stream);
Status launch_logsumexp(const ReduceLaunch& l, cudaStream_t stream);
Status launch_moments(const ReduceLaunch& l, cudaStream_t stream);  // var, std, var_mean, std_mean

}  // namespace reducekit
