// Softmax family over one dim. Tensors live on the current CUDA device; work is queued on
// `stream` with no host synchronization and no allocation, so calls are graph-capturable.
//
// Layout: `dim` must be the innermost dim of x (stride 1) and the other dims must merge into
// one row index (any contiguous tensor, or rows sliced from a wider buffer). Other layouts
// return StatusCode::kUnsupported; make them contiguous first (the PyTorch layer does).
// The output may be the input itself (in place) but may not partly overlap it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

// y = exp(x - max) / sum(exp(x - max)) along dim; y has x's shape and dtype.
Status softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream);

// y = x - max - log(sum(exp(x - max))) along dim.
Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream);

// dx = y * (dy - sum(y * dy)), with y the softmax output.
Status softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                        cudaStream_t stream);

// dx = dy - exp(y) * sum(dy), with y the log_softmax output.
Status log_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                            cudaStream_t stream);

}  // namespace reducekit
