// SPDX-License-Identifier: Apache-2.0
// argmax and argmin: instantiations (a file of their own so they compile in parallel with amax/amin).
#include "ops/reduce_launch.cuh"

namespace reducekit {
using kernels::ArgExtremumPolicy;

Status launch_argmax(const ReduceLaunch& l, cudaStream_t s) {
  return launch_for_dtype<WithFlag<ArgExtremumPolicy, true>::Policy>(l, s);
}
Status launch_argmin(const ReduceLaunch& l, cudaStream_t s) {
  return launch_for_dtype<WithFlag<ArgExtremumPolicy, false>::Policy>(l, s);
}
}  // namespace reducekit
