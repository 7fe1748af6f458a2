// SPDX-License-Identifier: Apache-2.0
// Fused residual add + rms_norm with a bias (add_rms_norm.cu dispatches here when one is given).
#include "ops/norm_launch.cuh"

namespace reducekit::norm_detail {

Status add_rms_norm_bias_forward(const ForwardCall& c, cudaStream_t stream) {
  return run_forward<kernels::RmsNormBiasForwardOp, true>(c, stream);
}

}  // namespace reducekit::norm_detail
