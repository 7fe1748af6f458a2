// SPDX-License-Identifier: Apache-2.0
// Fused residual add + rms_norm: one read of x and residual, one write of y and s.
#include "ops/norm_launch.cuh"

namespace reducekit {

Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                    const TensorView& sum, const TensorView* rstd, const Workspace& workspace, cudaStream_t stream) {
  const norm_detail::ForwardCall call{&x, &residual, normalized_shape, weight, bias, eps, &y, &sum, nullptr, rstd,
                                      &workspace};
  if (bias != nullptr) return norm_detail::add_rms_norm_bias_forward(call, stream);
  return norm_detail::run_forward<kernels::RmsNormForwardOp, true>(call, stream);
}

Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                    const TensorView& sum, const TensorView* rstd, cudaStream_t stream) {
  return add_rms_norm(x, residual, normalized_shape, weight, bias, eps, y, sum, rstd, Workspace{}, stream);
}

Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, double eps, const TensorView& y, const TensorView& sum,
                    const TensorView* rstd, const Workspace& workspace, cudaStream_t stream) {
  return add_rms_norm(x, residual, normalized_shape, weight, nullptr, eps, y, sum, rstd, workspace, stream);
}

Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, double eps, const TensorView& y, const TensorView& sum,
                    const TensorView* rstd, cudaStream_t stream) {
  return add_rms_norm(x, residual, normalized_shape, weight, nullptr, eps, y, sum, rstd, Workspace{}, stream);
}

}  // namespace reducekit
