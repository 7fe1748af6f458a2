// SPDX-License-Identifier: Apache-2.0
// rms_norm forward with a bias (rms_norm.cu dispatches here when one is given): its own kernels,
// so the op without a bias keeps its code (kernels/norm_ops.cuh, RmsNormBiasForwardOp).
#include "ops/norm_launch.cuh"

namespace reducekit::norm_detail {

Status rms_norm_bias_forward(const ForwardCall& c, cudaStream_t stream) {
  return run_forward<kernels::RmsNormBiasForwardOp, false>(c, stream);
}

}  // namespace reducekit::norm_detail
