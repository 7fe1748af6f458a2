// SPDX-License-Identifier: Apache-2.0
// sum and mean: instantiations (float64 accumulation too, for dtype=float64 on narrower inputs).
#include "ops/reduce_launch.cuh"

namespace reducekit {
Status launch_sum(const ReduceLaunch& l, cudaStream_t stream) {
  return launch_for_dtype<kernels::SumPolicy, true>(l, stream);
}
}  // namespace reducekit
