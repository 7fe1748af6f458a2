// SPDX-License-Identifier: Apache-2.0
// var, std, var_mean, std_mean: instantiations.
#include "ops/reduce_launch.cuh"

namespace reducekit {
Status launch_moments(const ReduceLaunch& l, cudaStream_t stream) {
  return launch_for_dtype<kernels::MomentsPolicy>(l, stream);
}
}  // namespace reducekit
