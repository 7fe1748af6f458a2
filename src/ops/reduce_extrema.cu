// SPDX-License-Identifier: Apache-2.0
// amax and amin: instantiations.
#include "ops/reduce_launch.cuh"

namespace reducekit {
using kernels::ExtremumPolicy;

Status launch_amax(const ReduceLaunch& l, cudaStream_t s) {
  return launch_for_dtype<WithFlag<ExtremumPolicy, true>::Policy>(l, s);
}
Status launch_amin(const ReduceLaunch& l, cudaStream_t s) {
  return launch_for_dtype<WithFlag<ExtremumPolicy, false>::Policy>(l, s);
}
}  // namespace reducekit
