// SPDX-License-Identifier: Apache-2.0
// layer_norm forward: validation and planning in norm_launch.cuh, math in kernels/norm_ops.cuh.
#include "ops/norm_launch.cuh"

namespace reducekit {

Status layer_norm_requirements(const TensorView& x, const NormShape& normalized_shape, bool residual,
                               NormRequirements* requirements) {
  if (residual)
    return norm_detail::forward_requirements<kernels::LayerNormForwardOp, true>(x, normalized_shape, requirements);
  return norm_detail::forward_requirements<kernels::LayerNormForwardOp, false>(x, normalized_shape, requirements);
}

Status layer_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                  const TensorView* bias, double eps, const TensorView& y, const TensorView* mean,
                  const TensorView* rstd, const Workspace& workspace, cudaStream_t stream) {
  return norm_detail::run_forward<kernels::LayerNormForwardOp, false>(
      {&x, nullptr, normalized_shape, weight, bias, eps, &y, nullptr, mean, rstd, &workspace}, stream);
}

Status layer_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                  const TensorView* bias, double eps, const TensorView& y, const TensorView* mean,
                  const TensorView* rstd, cudaStream_t stream) {
  return layer_norm(x, normalized_shape, weight, bias, eps, y, mean, rstd, Workspace{}, stream);
}

}  // namespace reducekit
