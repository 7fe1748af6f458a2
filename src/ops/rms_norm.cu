// SPDX-License-Identifier: Apache-2.0
// rms_norm forward: validation and planning in norm_launch.cuh, math in kernels/norm_ops.cuh.
#include "ops/norm_launch.cuh"

namespace reducekit {

Status rms_norm_requirements(const TensorView& x, const NormShape& normalized_shape, bool residual,
                             NormRequirements* requirements) {
  if (residual)
    return norm_detail::forward_requirements<kernels::RmsNormForwardOp, true>(x, normalized_shape, requirements);
  return norm_detail::forward_requirements<kernels::RmsNormForwardOp, false>(x, normalized_shape, requirements);
}

Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                const TensorView* bias, double eps, const TensorView& y, const TensorView* rstd,
                const Workspace& workspace, cudaStream_t stream) {
  const norm_detail::ForwardCall call{&x, nullptr, normalized_shape, weight, bias, eps, &y, nullptr, nullptr, rstd,
                                      &workspace};
  if (bias != nullptr) return norm_detail::rms_norm_bias_forward(call, stream);
  return norm_detail::run_forward<kernels::RmsNormForwardOp, false>(call, stream);
}

Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                const TensorView* bias, double eps, const TensorView& y, const TensorView* rstd, cudaStream_t stream) {
  return rms_norm(x, normalized_shape, weight, bias, eps, y, rstd, Workspace{}, stream);
}

Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight, double eps,
                const TensorView& y, const TensorView* rstd, const Workspace& workspace, cudaStream_t stream) {
  return rms_norm(x, normalized_shape, weight, nullptr, eps, y, rstd, workspace, stream);
}

Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight, double eps,
                const TensorView& y, const TensorView* rstd, cudaStream_t stream) {
  return rms_norm(x, normalized_shape, weight, nullptr, eps, y, rstd, Workspace{}, stream);
}

}  // namespace reducekit
