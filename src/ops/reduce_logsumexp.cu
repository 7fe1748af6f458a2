// SPDX-License-Identifier: Apache-2.0
// logsumexp: instantiations.
#include "ops/reduce_launch.cuh"

namespace reducekit {
Status launch_logsumexp(const ReduceLaunch& l, cudaStream_t stream) {
  return launch_for_dtype<kernels::LogSumExpPolicy>(l, stream);
}
}  // namespace reducekit
