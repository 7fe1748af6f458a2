// SPDX-License-Identifier: Apache-2.0
// Backward of softmax and log_softmax: one pass over (y, dy) per row.
#include "kernels/softmax_ops.cuh"
#include "ops/rowwise_op.cuh"
#include "reducekit/softmax.hpp"

namespace reducekit {

Status softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                        cudaStream_t stream) {
  return run_rowwise<kernels::SoftmaxBackwardOp, 2>({{y, dy}, {"y", "dy"}, dx, "dx"}, dim, stream);
}

Status log_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                            cudaStream_t stream) {
  return run_rowwise<kernels::LogSoftmaxBackwardOp, 2>({{y, dy}, {"y", "dy"}, dx, "dx"}, dim, stream);
}

}  // namespace reducekit
