// SPDX-License-Identifier: Apache-2.0
// The softmax family over a non-innermost dim of dense tensors (kernels/softmax_columns.cuh),
// called by the softmax entry points before the row path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

enum class SoftmaxColumnOp { kSoftmax, kLogSoftmax, kSoftmaxBackward, kLogSoftmaxBackward };

// Runs `op` over `dim` when it is a column problem: dim not innermost and every tensor dense
// (contiguous). Sets *handled; when false nothing ran and the row path decides (rows, or
// kUnsupported for layouts neither addresses). Inputs: x (forward) or (y, dy) (backward).
Status run_softmax_columns(SoftmaxColumnOp op, const TensorView* in, const char* const* in_names,
                           const TensorView& out, const char* out_name, int64_t dim, cudaStream_t stream,
                           bool* handled);

// Whether softmax or log_softmax of x over dim runs on the column path (which needs no
// workspace); errors as the call itself would give them.
Status softmax_columns_route(const TensorView& x, const char* name, int64_t dim, bool* column);

}  // namespace reducekit
