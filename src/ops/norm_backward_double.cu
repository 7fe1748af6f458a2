// SPDX-License-Identifier: Apache-2.0
// layer_norm / rms_norm backward kernels for double x (norm_backward_launch.cuh).
#include "ops/norm_backward_launch.cuh"

template struct reducekit::norm_detail::NormBackwardKernels<double>;
