// SPDX-License-Identifier: Apache-2.0
// softmax (softmax_forward.cuh), and the workspace softmax and log_softmax ask for.
#include "ops/softmax_forward.cuh"
#include "reducekit/softmax.hpp"

namespace reducekit {

Status softmax_requirements(const TensorView& x, int64_t dim, SoftmaxRequirements* requirements) {
  using detail::LogSoftmaxOp;
  using detail::SoftmaxOp;
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
  return detail::softmax_forward<detail::SoftmaxOp>(SoftmaxColumnOp::kSoftmax, x, y, dim, stream, nullptr);
}

Status softmax(const TensorView& x, const TensorView& y, int64_t dim, const Workspace& workspace,
               cudaStream_t stream) {
  return detail::softmax_forward<detail::SoftmaxOp>(SoftmaxColumnOp::kSoftmax, x, y, dim, stream, &workspace);
}

}  // namespace reducekit
