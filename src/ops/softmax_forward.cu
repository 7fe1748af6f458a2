// softmax and log_softmax: validation and planning in rowwise_op.cuh, math in softmax_ops.cuh.
#include "kernels/softmax_ops.cuh"
#include "ops/rowwise_op.cuh"
#include "reducekit/softmax.hpp"

namespace reducekit {
namespace {
template <typename T> using SoftmaxOp = kernels::SoftmaxForwardOp<T, false>;
template <typename T> using LogSoftmaxOp = kernels::SoftmaxForwardOp<T, true>;
}  // namespace

Status softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream) {
  return run_rowwise<SoftmaxOp, 1>({{x}, {"x"}, y, "y"}, dim, stream);
}

Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream) {
  return run_rowwise<LogSoftmaxOp, 1>({{x}, {"x"}, y, "y"}, dim, stream);
}

}  // namespace reducekit
