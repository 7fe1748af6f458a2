// SPDX-License-Identifier: Apache-2.0
// softmax and log_softmax: validation and planning in rowwise_op.cuh, math in softmax_ops.cuh.
#include "kernels/softmax_ops.cuh"
#include "ops/rowwise_op.cuh"
#include "ops/softmax_columns.hpp"
#include "reducekit/softmax.hpp"

namespace reducekit {
namespace {
template <typename T> using SoftmaxOp = kernels::SoftmaxForwardOp<T, false>;
template <typename T> using LogSoftmaxOp = kernels::SoftmaxForwardOp<T, true>;

// A non-innermost dim of dense tensors runs on the column kernel (no workspace); the rest on rows.
Status forward(SoftmaxColumnOp op, const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream,
               const Workspace* workspace) {
  const char* const names[] = {"x"};
  bool handled = false;
  REDUCEKIT_RETURN_IF_ERROR(run_softmax_columns(op, &x, names, y, "y", dim, stream, &handled));
  if (handled) return Status::ok();
  if (op == SoftmaxColumnOp::kSoftmax) return run_rowwise<SoftmaxOp, 1>({{x}, {"x"}, y, "y"}, dim, stream, workspace);
  return run_rowwise<LogSoftmaxOp, 1>({{x}, {"x"}, y, "y"}, dim, stream, workspace);
}
}  // namespace

Status softmax_requirements(const TensorView& x, int64_t dim, SoftmaxRequirements* requirements) {
  if (requirements == nullptr) return Status::invalid_argument("requirements: must not be null");
  *requirements = {};
  bool column = false;
  REDUCEKIT_RETURN_IF_ERROR(softmax_columns_route(x, "x", dim, &column));
  if (column) return Status::ok();
  RowSplitWorkspace need;
  // log_softmax's statistic is the same (max, sum of exp) pair, so one answer serves both.
  static_assert(sizeof(SoftmaxOp<float>::Stat) == sizeof(LogSoftmaxOp<float>::Stat) &&
                    sizeof(SoftmaxOp<double>::Stat) == sizeof(LogSoftmaxOp<double>::Stat),
                "softmax and log_softmax share one workspace size");
  REDUCEKIT_RETURN_IF_ERROR(rowwise_workspace<SoftmaxOp>(x, "x", dim, &need));
  requirements->workspace_bytes = need.bytes;
  requirements->workspace_zeroed_bytes = need.zeroed_bytes;
  return Status::ok();
}

Status softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream) {
  return forward(SoftmaxColumnOp::kSoftmax, x, y, dim, stream, nullptr);
}

Status softmax(const TensorView& x, const TensorView& y, int64_t dim, const Workspace& workspace,
               cudaStream_t stream) {
  return forward(SoftmaxColumnOp::kSoftmax, x, y, dim, stream, &workspace);
}

Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream) {
  return forward(SoftmaxColumnOp::kLogSoftmax, x, y, dim, stream, nullptr);
}

Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, const Workspace& workspace,
                   cudaStream_t stream) {
  return forward(SoftmaxColumnOp::kLogSoftmax, x, y, dim, stream, &workspace);
}

}  // namespace reducekit
