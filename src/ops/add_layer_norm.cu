// SPDX-License-Identifier: Apache-2.0
// Fused residual add + layer_norm: one read of x and residual, one write of y and s.
#include "ops/norm_launch.cuh"

namespace reducekit {

Status add_layer_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                      const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                      const TensorView& sum, const TensorView* mean, const TensorView* rstd,
                      const Workspace& workspace, cudaStream_t stream) {
  return norm_detail::run_forward<kernels::LayerNormForwardOp, true>(
      {&x, &residual, normalized_shape, weight, bias, eps, &y, &sum, mean, rstd, &workspace}, stream);
}

Status add_layer_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                      const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                      const TensorView& sum, const TensorView* mean, const TensorView* rstd, cudaStream_t stream) {
  return add_layer_norm(x, residual, normalized_shape, weight, bias, eps, y, sum, mean, rstd, Workspace{}, stream);
}

}  // namespace reducekit
