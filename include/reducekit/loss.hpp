// SPDX-License-Identifier: Apache-2.0
// Cross-entropy of logits against class-index or class-probability targets, per row, on raw
// device memory.
//
// logits: [..., classes] over its last dim (the other dims merge into rows; the last dim must be
// innermost, rows at any stride and alignment); target: int64, one per row, contiguous. With z
// the logits (soft-capped when `softcap` > 0: z = softcap * tanh(logits / softcap)), lse the
// row's logsumexp of z, w the class weights (1 without) and t the row's target, a kept row's
// loss is
//   (1 - ls) * w[t] * (lse - z[t]) + (ls / classes) * sum_j w[j] * (lse - z[j]) + s * lse^2
// (ls: label_smoothing, s: lse_square_scale); a row whose target is ignore_index has loss 0. A
// target outside [0, classes) that is not ignore_index reads and writes nothing out of bounds:
// its row's loss is NaN (and its gradient NaN). torch's 'mean' reduction is sum(loss) / sum of
// w[t] over the kept rows, its 'sum' sum(loss): cross_entropy_reduce, a fixed-order sum.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;   // in [0, 1]
  double lse_square_scale = 0.0;  // the z-loss factor s (finite)
  double softcap = 0.0;           // 0: none; else > 0 and finite
};

// loss and lse: [rows] each, contiguous, float32 (float64 for float64 logits); lse is what the
// backward needs. A row's bits depend on its values, length and the options alone: a batch of
// few rows splits each row over a cluster of CTAs with the same bits. weight: null or [classes],
// contiguous, the same dtype as loss. loss and lse share no memory with each other or with
// logits, target and weight.
Status cross_entropy_forward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                             const CrossEntropyOptions& options, const TensorView& loss, const TensorView& lse,
                             cudaStream_t stream);

// dlogits = grad_loss[row] * d(loss[row]) / d(logits[row]), the shape and dtype of logits (its own
// row stride), overlapping neither itself nor logits, target, weight, lse or grad_loss. grad_loss:
// [rows], or one value for every row (for torch's 'mean', the upstream gradient over the mean's
// denominator), the dtype of loss. lse: the forward's. Fastest where each dlogits row starts at
// the same offset in a 16-byte granule as its logits row (both dense, for one): the kernel then
// moves whole aligned granules at any row length; the bits are the same either way.
Status cross_entropy_backward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                              const TensorView& lse, const TensorView& grad_loss, const CrossEntropyOptions& options,
                              const TensorView& dlogits, cudaStream_t stream);

// The forward and the backward in one call, for a caller that knows each row's upstream
// gradient before the forward (training: the mean's 1 / denominator, or 1 for 'sum'; grad_loss
// as cross_entropy_backward's: [rows] or one value for every row): loss, lse
// and dlogits = grad_loss[row] * d(loss[row]) / d(logits[row]). 16-bit rows that the softmax family
// stages (16-40, 64-110 and 128-880 KiB), without label smoothing or soft-capping, are read once, staged in shared memory, and their
// gradient written from there in the same kernel; other rows run cross_entropy_forward's and
// cross_entropy_backward's kernels, so their bits are those two calls'. The staged rows' bits are
// those of cross_entropy_forward too where it stages the row (one CTA a row: up to 110 KiB).
// dlogits may be logits itself (the same data and strides): the gradient is then written over the
// logits, and training needs no tensor of the logits' size besides them. Otherwise dlogits
// overlaps none of the other tensors.
Status cross_entropy_fused(const TensorView& logits, const TensorView& target, const TensorView* weight,
                           const TensorView& grad_loss, const CrossEntropyOptions& options, const TensorView& loss,
                           const TensorView& lse, const TensorView& dlogits, cudaStream_t stream);

enum class LossReduction { kSum, kMean };

// torch's reductions of per-row cross-entropy losses, in one launch: out = sum(loss) (kSum) or
// sum(loss) / the mean's denominator (kMean), converted to out's dtype. The denominator: with
// class-index targets, sum of w[t] over the rows whose target is not ignore_index (their count
// without weights; 0 / 0 = NaN where none is kept); with target null (class-probability losses,
// cross_entropy_probs_forward's), the rows. Fixed-order sums: the bits depend on the losses and
// targets alone. target: null or [rows] int64, loss: [rows], contiguous, as the forward took and
// gave them; loss may be null (not with target null) for the denominator alone, before the
// losses: out then gets numerator / denominator, which with a step's upstream gradient as the
// numerator is cross_entropy_fused's grad_loss, divided as the reduced loss's backward divides
// (numerator ignored where loss is given). weight: null or [classes], loss's
// dtype, with class-index targets only. out: one value of any float dtype whose accumulation
// dtype is loss's (float32 for 16-bit and float32 out, float64 for float64). denominator: null,
// or one value in loss's dtype that gets the mean's denominator (1 for kSum), what the backward
// divides the upstream gradient by. Outputs overlap no input.
Status cross_entropy_reduce(const TensorView* loss, const TensorView* target, const TensorView* weight,
                            int64_t ignore_index, LossReduction reduction, const TensorView& out,
                            const TensorView* denominator, cudaStream_t stream, double numerator = 0.0);

// A training step of torch's 'mean' or 'sum' in one call: out = the reduced loss, as
// cross_entropy_reduce gives it over cross_entropy_fused's per-row losses, and dlogits =
// d(grad_scale * out) / d(logits), as cross_entropy_fused gives it with grad_loss = grad_scale /
// the mean's denominator (grad_scale for kSum) for every row, that quotient being what
// cross_entropy_reduce's numerator gives. Three launches, the second and third started behind the
// one ahead of them (programmatic dependent launch: the fused kernel's rows load while the
// denominator is summed). loss and lse: [rows] in the accumulation dtype, the per-row values
// (cross_entropy_fused's); grad_loss: one value of that dtype, written with the upstream gradient
// of every row; out: one value of any float dtype whose accumulation dtype is logits'. dlogits
// may be logits itself, as in cross_entropy_fused. Every argument is checked before the first
// launch.
Status cross_entropy_step(const TensorView& logits, const TensorView& target, const TensorView* weight,
                          const CrossEntropyOptions& options, LossReduction reduction, double grad_scale,
                          const TensorView& out, const TensorView& loss, const TensorView& lse,
                          const TensorView& grad_loss, const TensorView& dlogits, cudaStream_t stream);

// Class-probability targets: target holds a row of probabilities per row of logits (the logits'
// shape and dtype, the class dim innermost, rows at any stride and alignment). With q = (1 - ls)
// target + ls / classes, a row's loss is
//   sum_j w[j] q[j] (lse - z[j]) + s * lse^2
// (torch's for probability targets, plus the z-loss), and mass = sum_j w[j] q[j] is what the
// backward needs beside lse. options.ignore_index plays no part. torch's 'mean' reduction is
// sum(loss) / rows, its 'sum' sum(loss). loss, lse and mass: [rows] each, contiguous, float32
// (float64 for float64 logits), sharing no memory with the inputs or each other.
Status cross_entropy_probs_forward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                                   const CrossEntropyOptions& options, const TensorView& loss, const TensorView& lse,
                                   const TensorView& mass, cudaStream_t stream);

// dlogits = grad_loss[row] * d(loss[row]) / d(logits[row]) (grad_loss: [rows] or one value for
// every row, as cross_entropy_backward's) and, where dtarget is not null,
// dtarget = grad_loss[row] * d(loss[row]) / d(target[row]) = -grad_loss (1 - ls) w[j] (z[j] - lse);
// both of logits' shape and dtype (each its own row stride), overlapping none of the inputs or
// each other. lse and mass: the forward's. Fastest where the target, dlogits and dtarget rows start
// at their logits rows' offsets in a 16-byte granule (cross_entropy_backward's note).
Status cross_entropy_probs_backward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                                    const TensorView& lse, const TensorView& mass, const TensorView& grad_loss,
                                    const CrossEntropyOptions& options, const TensorView& dlogits,
                                    const TensorView* dtarget, cudaStream_t stream);

}  // namespace reducekit
