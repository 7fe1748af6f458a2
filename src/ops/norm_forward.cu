// layer_norm and rms_norm forward: validation and planning in norm_launch.cuh, math in
// kernels/norm_ops.cuh.
#include "ops/norm_launch.cuh"

namespace reducekit {

Status layer_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                  const TensorView* bias, double eps, const TensorView& y, const TensorView* mean,
                  const TensorView* rstd, cudaStream_t stream) {
  return norm_detail::run_forward<kernels::LayerNormForwardOp, false>(
      {&x, nullptr, normalized_shape, weight, bias, eps, &y, nullptr, mean, rstd}, stream);
}

Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight, double eps,
                const TensorView& y, const TensorView* rstd, cudaStream_t stream) {
  return norm_detail::run_forward<kernels::RmsNormForwardOp, false>(
      {&x, nullptr, normalized_shape, weight, nullptr, eps, &y, nullptr, nullptr, rstd}, stream);
}

}  // namespace reducekit
