// SPDX-License-Identifier: Apache-2.0
// The forward softmax ops' common path (softmax.cu, log_softmax.cu): a non-innermost dim of dense
// tensors runs on the column kernel (no workspace), the rest on rows (validation and planning in
// rowwise_op.cuh, launches in rowwise_launch.cuh, math in softmax_ops.cuh).
#pragma once

#include "kernels/softmax_ops.cuh"
#include "ops/rowwise_op.cuh"
#include "ops/softmax_columns.hpp"

namespace reducekit::detail {

template <typename T> using SoftmaxOp = kernels::SoftmaxForwardOp<T, false>;
template <typename T> using LogSoftmaxOp = kernels::SoftmaxForwardOp<T, true>;

template <template <typename> class OpFor>
Status softmax_forward(SoftmaxColumnOp op, const TensorView& x, const TensorView& y, int64_t dim,
                       cudaStream_t stream, const Workspace* workspace) {
  const char* const names[] = {"x"};
  bool handled = false;
  REDUCEKIT_RETURN_IF_ERROR(run_softmax_columns(op, &x, names, y, "y", dim, stream, &handled));
  if (handled) return Status::ok();
  return run_rowwise<OpFor, 1>({{x}, {"x"}, y, "y"}, dim, stream, workspace);
}

}  // namespace reducekit::detail
