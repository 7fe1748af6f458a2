// SPDX-License-Identifier: Apache-2.0
// Softmax family over one dim. Tensors live on the current CUDA device; work is queued on
// `stream` with no host synchronization and no allocation, so calls are graph-capturable.
//
// Layout: either `dim` is the innermost dim of x (stride 1) and the other dims merge into one
// row index (any contiguous tensor, or rows sliced from a wider buffer), or every tensor of the
// call is dense (contiguous) and `dim` is any other dim: x is then read in place as columns
// [outer, K, inner] (K = sizes[dim], inner = the product of the sizes after it), once where a
// CTA's K x tile-width columns fit in shared memory, twice where they do not (K above 3200 for
// the forward ops, 1600 for the backward ops, any dtype), with no transposing copy and no
// workspace. Other layouts (sliced or permuted tensors with a non-innermost dim) return
// StatusCode::kUnsupported; make them contiguous with dim last first (the PyTorch layer does).
// Every dense tensor takes the column kernels, however few its columns (a few long columns run
// on few CTAs: slow, but a column's bits never depend on how many others there are). Column
// results are deterministic and batch-invariant (a column's bits depend on its values, K and
// dtype alone) but, reduced in another order, may differ in the last bits from the same values
// laid out as a row.
// The output may be the input itself (in place) but may not partly overlap it, nor itself (rows
// sharing memory, as in a view with stride 0): kInvalidArgument naming the output.
//
// Workspace (forward ops; the column path never needs one). 16-bit rows longer than one cluster of CTAs holds in registers
// (about 2^20 elements on an H200) run fastest split into chunks over a cooperative grid, which
// needs a small workspace (float32 and float64 rows never do: they ran faster unsplit):
// softmax_requirements() says how many bytes, and how many of them (the per-row arrival
// counters, a prefix or Workspace::tickets) must be zero on entry; every call
// leaves them zero again, so one zeroed counter buffer per stream serves every later call on
// it (reducekit/workspace.hpp). Without a workspace (the overloads without one, or a
// Workspace{} with neither data nor tickets), or where the device cannot launch a cooperative
// grid, such rows take the stream kernel instead: a row is read twice, but results are still
// deterministic and batch-invariant. The two paths reduce in different orders, so their results
// may differ in the last bits; each path alone gives the same bits for a row whatever the batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

struct SoftmaxRequirements {
  std::size_t workspace_bytes = 0;         // 0 when the call needs no workspace
  std::size_t workspace_zeroed_bytes = 0;  // prefix of the workspace that must be zero on entry
};

// What softmax or log_softmax of x over dim needs (the same for both). Errors name "x" or "dim".
Status softmax_requirements(const TensorView& x, int64_t dim, SoftmaxRequirements* requirements);

// y = exp(x - max) / sum(exp(x - max)) along dim; y has x's shape and dtype.
Status softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream);
Status softmax(const TensorView& x, const TensorView& y, int64_t dim, const Workspace& workspace,
               cudaStream_t stream);

// y = x - max - log(sum(exp(x - max))) along dim.
Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, cudaStream_t stream);
Status log_softmax(const TensorView& x, const TensorView& y, int64_t dim, const Workspace& workspace,
                   cudaStream_t stream);

// dx = y * (dy - sum(y * dy)), with y the softmax output.
Status softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                        cudaStream_t stream);

// dx = dy - exp(y) * sum(dy), with y the log_softmax output.
Status log_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx, int64_t dim,
                            cudaStream_t stream);

}  // namespace reducekit
