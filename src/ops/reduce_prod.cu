// SPDX-License-Identifier: Apache-2.0
// prod: instantiations.
#include "ops/reduce_launch.cuh"

namespace reducekit {
Status launch_prod(const ReduceLaunch& l, cudaStream_t stream) {
  return launch_for_dtype<kernels::ProdPolicy>(l, stream);
}
}  // namespace reducekit
