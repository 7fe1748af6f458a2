// SPDX-License-Identifier: Apache-2.0
// Backward of softmax and log_softmax: one pass over (y, dy) per row, or per column where dim is
// not innermost (dense tensors, softmax_columns.hpp).
#include "kernels/softmax_ops.cuh"
#include "ops/rowwise_op.cuh"
#include "ops/softmax_columns.hpp"
#include "reducekit/softmax.hpp"

namespace reducekit {
namespace {
Status backward_columns(SoftmaxColumnOp op, const TensorView& y, const TensorView& dy, const TensorView& dx,
                        int64_t dim, cudaStream_t stream, bool* handled) {
  const TensorView in[] = {y, dy};
  const char* const names[] = {"y", "dy"};
  return run_softmax_columns(op, in, names, dx, "dx", dim, stream, handled);
}
}  // namespace

Status softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                        cudaStream_t stream) {
  bool handled = false;
  REDUCEKIT_RETURN_IF_ERROR(backward_columns(SoftmaxColumnOp::kSoftmaxBackward, y, dy, dx, dim, stream, &handled));
  if (handled) return Status::ok();
  return run_rowwise<kernels::SoftmaxBackwardOp, 2>({{y, dy}, {"y", "dy"}, dx, "dx"}, dim, stream);
}

Status log_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                            cudaStream_t stream) {
  bool handled = false;
  REDUCEKIT_RETURN_IF_ERROR(backward_columns(SoftmaxColumnOp::kLogSoftmaxBackward, y, dy, dx, dim, stream, &handled));
  if (handled) return Status::ok();
  return run_rowwise<kernels::LogSoftmaxBackwardOp, 2>({{y, dy}, {"y", "dy"}, dx, "dx"}, dim, stream);
}

}  // namespace reducekit
