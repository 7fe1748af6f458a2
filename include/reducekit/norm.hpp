// SPDX-License-Identifier: Apache-2.0
// layer_norm and rms_norm over the trailing dims of x: forward, fused residual add, backward.
// Tensors live on the current CUDA device; work is queued on `stream` with no host
// synchronization and no allocation, so calls are graph-capturable.
//
// Semantics follow torch.nn.functional.layer_norm / rms_norm:
//   layer_norm: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(biased var + eps)
//   rms_norm:   y = x * rstd * weight (+ bias),        rstd = 1 / sqrt(mean(x^2) + eps)
// over the last normalized_shape.rank dims of x (which must equal normalized_shape). torch's
// rms_norm has no bias; reducekit's optional one (Hugging Face-style models that carry one) is
// added in the same kernel, and equals rms_norm(x, weight) + bias rounded once.
// The fused residual variants read x and residual once and write y = norm(s) and s = x + residual
// (s rounded to x's dtype first, so y equals norm(x + residual) computed unfused).
//
// Dtypes: x (residual, y, s, dy, dx) float32, float16, bfloat16 or float64, all alike; weight and
// bias have x's dtype, or float32 when x is 16-bit (mixed-precision training); dweight/dbias have
// the weight's dtype. mean/rstd are float32 (float64 for float64 x), one per row, contiguous.
// Arithmetic is float32 (float64 for float64).
//
// Layout: the normalized dims of every x-shaped tensor must be dense (stride 1 innermost) and
// the leading dims must merge into one row index (contiguous tensors, or rows sliced out of a
// wider buffer); otherwise kUnsupported (make it contiguous first, as the PyTorch layer does).
// weight and bias must be contiguous. Optional tensors are passed as nullptr.
// Aliasing: y and s may be the very view of x or residual, dx of dy or x (in place); beyond that
// no output shares memory with another tensor of the call (weight, bias, mean, rstd, another
// output) or overlaps itself (rows sharing memory): kInvalidArgument naming the output.
//
// Determinism: the kernel configuration depends only on the row length and dtype, so forward
// results are batch-invariant; dweight/dbias are summed in a fixed order with no atomics, so
// they are identical bit for bit from run to run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "reducekit/reduce.hpp"  // Workspace
#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

// torch's normalized_shape: the sizes of x's trailing dims to normalize over.
struct NormShape {
  int rank = 0;
  int64_t sizes[kMaxRank] = {};

  // More than kMaxRank sizes cannot be stored; rank keeps the true count so validation reports it.
  static NormShape of(std::initializer_list<int64_t> list) {
    NormShape s;
    s.rank = static_cast<int>(list.size());
    int d = 0;
    for (int64_t v : list)
      if (d < kMaxRank) s.sizes[d++] = v;
    return s;
  }
};

// ---- forward ---------------------------------------------------------------------------------
// Workspace: 16-bit rows of over 1 MiB (x and residual together; shorter ones are re-read from
// L2), up to the length a grid holds at once, split into chunks over a cooperative grid, as
// softmax's do (reducekit/softmax.hpp has the contract): the *_requirements functions say how
// many bytes, and how many of them must be zero on entry; the overloads without a workspace (or
// with an empty one) run such rows on the stream kernel, which reads them twice. Either path
// alone is deterministic and batch-invariant; the two may differ in the last bits.
struct NormRequirements {
  std::size_t workspace_bytes = 0;         // 0 when the call needs no workspace
  std::size_t workspace_zeroed_bytes = 0;  // prefix of the workspace that must be zero on entry
};

// What layer_norm (residual false) or add_layer_norm (true) of x needs. Errors name "x" or
// "normalized_shape".
Status layer_norm_requirements(const TensorView& x, const NormShape& normalized_shape, bool residual,
                               NormRequirements* requirements);
// The same for rms_norm / add_rms_norm.
Status rms_norm_requirements(const TensorView& x, const NormShape& normalized_shape, bool residual,
                             NormRequirements* requirements);

// mean and rstd (may be nullptr) receive one value per row, for backward.
Status layer_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                  const TensorView* bias, double eps, const TensorView& y, const TensorView* mean,
                  const TensorView* rstd, cudaStream_t stream);
Status layer_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                  const TensorView* bias, double eps, const TensorView& y, const TensorView* mean,
                  const TensorView* rstd, const Workspace& workspace, cudaStream_t stream);

// eps is explicit; torch's eps=None is the dtype's epsilon (torch.finfo(x.dtype).eps). bias
// (may be nullptr) is checked as layer_norm's: weight's dtype when both are given. Without one,
// rms_norm runs the kernels it ran before the bias existed (a bias has kernels of its own).
Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                const TensorView* bias, double eps, const TensorView& y, const TensorView* rstd, cudaStream_t stream);
Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight,
                const TensorView* bias, double eps, const TensorView& y, const TensorView* rstd,
                const Workspace& workspace, cudaStream_t stream);
// Without a bias (the overloads above with bias = nullptr).
Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight, double eps,
                const TensorView& y, const TensorView* rstd, cudaStream_t stream);
Status rms_norm(const TensorView& x, const NormShape& normalized_shape, const TensorView* weight, double eps,
                const TensorView& y, const TensorView* rstd, const Workspace& workspace, cudaStream_t stream);

// y = layer_norm(s), s = x + residual. `sum` receives s.
Status add_layer_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                      const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                      const TensorView& sum, const TensorView* mean, const TensorView* rstd, cudaStream_t stream);
Status add_layer_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                      const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                      const TensorView& sum, const TensorView* mean, const TensorView* rstd,
                      const Workspace& workspace, cudaStream_t stream);

// y = rms_norm(s) (+ bias), s = x + residual. `sum` receives s.
Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                    const TensorView& sum, const TensorView* rstd, cudaStream_t stream);
Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, const TensorView* bias, double eps, const TensorView& y,
                    const TensorView& sum, const TensorView* rstd, const Workspace& workspace, cudaStream_t stream);
// Without a bias.
Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, double eps, const TensorView& y, const TensorView& sum,
                    const TensorView* rstd, cudaStream_t stream);
Status add_rms_norm(const TensorView& x, const TensorView& residual, const NormShape& normalized_shape,
                    const TensorView* weight, double eps, const TensorView& y, const TensorView& sum,
                    const TensorView* rstd, const Workspace& workspace, cudaStream_t stream);

// ---- backward --------------------------------------------------------------------------------
// Device scratch (CUB's convention) that a backward call computing dweight or dbias needs for
// x's shape, row count and dtype on the current device: pass at least that many bytes (16-byte
// aligned). Calls without dweight/dbias need none. It holds float32 (float64 for float64 x)
// partial column sums: 2 x G x cols, where G (at most 4 per SM, and at most the row count) is
// how many CTAs the fused backward keeps resident; rows outside the fused range
// (norm_backward_plan.hpp) need 2 x ceil(rows / 256) x cols; none of it need be zero
// (workspace_zeroed_bytes is 0). Asks the device (occupancy). Errors name "x", "normalized_shape"
// or "requirements".
Status norm_backward_requirements(const TensorView& x, const NormShape& normalized_shape,
                                  NormRequirements* requirements);

// dx (may be nullptr) in one pass over x and dy with the forward's mean/rstd; dweight and dbias
// (may be nullptr; dweight needs weight's shape, dbias too) as fixed-order column sums over rows,
// in the same pass for rows of 128 16-byte vectors up to 8 CTAs' worth (float32 509 .. 65536
// elements, 16-bit 1017 .. 65536, float64 255 .. 32768), else by a second pass over x and dy.
// dx may be dy or x (in place).
// weight may be nullptr (treated as ones). The workspace may be empty when neither is wanted.
Status layer_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                           const TensorView& mean, const TensorView& rstd, const TensorView* weight,
                           const TensorView* dx, const TensorView* dweight, const TensorView* dbias,
                           const Workspace& workspace, cudaStream_t stream);

// rms_norm's: dbias (may be nullptr; for a forward that had a bias) is the column sums of dy, in
// the same pass and order as layer_norm's, so it is deterministic too. The bias itself is not
// an input: it moves y, not the gradients.
Status rms_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                         const TensorView& rstd, const TensorView* weight, const TensorView* dx,
                         const TensorView* dweight, const TensorView* dbias, const Workspace& workspace,
                         cudaStream_t stream);
// Without dbias.
Status rms_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                         const TensorView& rstd, const TensorView* weight, const TensorView* dx,
                         const TensorView* dweight, const Workspace& workspace, cudaStream_t stream);

}  // namespace reducekit
