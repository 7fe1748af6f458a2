// SPDX-License-Identifier: Apache-2.0
// log_softmax (softmax_forward.cuh); its workspace is softmax's (softmax_requirements).
#include "ops/softmax_forward.cuh"
#include "reducekit/softmax.hpp"

namespace reducekit {

Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream) {
  return detail::softmax_forward<detail::LogSoftmaxOp>(SoftmaxColumnOp::kLogSoftmax, x, y, dim, stream, nullptr);
}

Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, const Workspace& workspace,
                   cudaStream_t stream) {
  return detail::softmax_forward<detail::LogSoftmaxOp>(SoftmaxColumnOp::kLogSoftmax, x, y, dim, stream, &workspace);
}

}  // namespace reducekit
