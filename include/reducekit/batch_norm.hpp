// SPDX-License-Identifier: Apache-2.0
// batch_norm on raw device memory: training forward (batch statistics, running-statistics
// update), inference forward (running statistics) and backward, in the channels-first (NCHW)
// and channels-last (NHWC / NDHWC) layouts.
//
// x: [N, C, *spatial], rank 2..5, dense in one of two layouts: contiguous (channels-first), or
// channels-last (C innermost, then the spatial dims, then N: torch's channels_last and
// channels_last_3d). y, dy and dx have x's sizes, dtype and strides. Per-channel tensors
// (weight, bias, running_mean, running_var, save_mean, save_invstd, dweight, dbias): [C],
// contiguous, float32 (float64 for float64 x), as torch keeps them for 16-bit inputs.
// Aliasing: y may be the very view of x, dx of x or dy (in place); beyond that no output (nor the
// running statistics, written in place) shares memory with another tensor of the call:
// kInvalidArgument naming the output.
//
// The statistics of a channel are merged in an order fixed by the shape and the device's SM count
// (exact two-pass moments, or a thread's shifted sums, within a CTA; Chan's merge across threads
// and CTAs; no atomics): the results are deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

struct BatchNormOptions {
  // running = (1 - momentum) * running + momentum * batch statistic (the variance unbiased).
  // torch's momentum=None (the cumulative average) is momentum = 1 / num_batches_tracked.
  double momentum = 0.1;
  double eps = 1e-5;
};

// Workspace of a training forward or a backward on x (see workspace.hpp for the convention).
struct BatchNormRequirements {
  std::size_t workspace_bytes = 0;
  std::size_t workspace_zeroed_bytes = 0;
};
Status batch_norm_requirements(const TensorView& x, BatchNormRequirements* req);

// Whether a training forward (backward: true, a backward with batch statistics) on x reads x
// (and dy) once: a channels-first channel that a cluster of at most 4 CTAs holds in shared
// memory, with the other tensors at x's offset from a 16-byte boundary (as fresh allocations are).
// Otherwise three passes: statistics, a merge per channel, then y (or dx), x read twice.
Status batch_norm_reads_once(const TensorView& x, bool backward, bool* once);

// Training forward: save_mean, save_invstd = the batch mean and 1 / sqrt(biased variance + eps)
// per channel; y = (x - mean) * invstd * weight + bias; running_mean / running_var (both or
// neither; may be null) updated in place. weight, bias: may be null (1 and 0). A channel must
// have more than one value (N * spatial > 1), as torch requires; with N * spatial == 0 nothing
// is read or written except save_mean and save_invstd, which become NaN.
Status batch_norm_training_forward(const TensorView& x, const TensorView* weight, const TensorView* bias,
                                   const TensorView* running_mean, const TensorView* running_var,
                                   const BatchNormOptions& options, const TensorView& y, const TensorView& save_mean,
                                   const TensorView& save_invstd, const Workspace& workspace, cudaStream_t stream);

// Inference forward: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias. save_mean
// and save_invstd (may be null) receive running_mean and 1 / sqrt(running_var + eps), what the
// backward of an inference forward reads. One read of x and one write of y; no workspace.
Status batch_norm_inference_forward(const TensorView& x, const TensorView* weight, const TensorView* bias,
                                    const TensorView& running_mean, const TensorView& running_var, double eps,
                                    const TensorView& y, const TensorView* save_mean, const TensorView* save_invstd,
                                    cudaStream_t stream);

// Backward from dy, x and the forward's save_mean / save_invstd. With `batch_statistics` (the
// forward was a training forward) dx = weight * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)),
// the statistics' dependence on x included; without, dx = weight * invstd * dy. dweight =
// sum(dy * xhat), dbias = sum(dy) per channel. dx, dweight, dbias: each may be null (not wanted).
Status batch_norm_backward(const TensorView& dy, const TensorView& x, const TensorView* weight,
                           const TensorView& save_mean, const TensorView& save_invstd, bool batch_statistics,
                           const TensorView* dx, const TensorView* dweight, const TensorView* dbias,
                           const Workspace& workspace, cudaStream_t stream);

// ---- Stages of a batch spread over ranks (SyncBatchNorm) ----------------------------------
// Each rank holds a part of the batch (any size, 0 included; the same C, dtype and options on
// every rank). The statistics move between ranks as packets: float64 [C][kBatchNormPacketWidth]
// per rank, whatever x's dtype (a count stays exact; a packet is 24 bytes a channel). Gathered
// packets are [R][C][kBatchNormPacketWidth], contiguous, in rank order; the caller exchanges
// them with any collective (an allgather). Merges run in rank order over the packets alone, so
// every rank that gathers the same packets computes bit-identical statistics.
//
//   forward:  batch_norm_moments -> allgather -> batch_norm_merge_moments -> batch_norm_apply
//   backward: batch_norm_backward_sums -> allgather -> batch_norm_backward_apply
//
// <reducekit/batch_norm_nccl.hpp> runs these over one ncclAllGather each way.
constexpr int kBatchNormPacketWidth = 3;

// This rank's moments packet [C][3]: (count, mean, M2) of each channel of x, count = N * spatial
// (0 allowed: the row is (0, 0, 0)), mean and M2 merged in the training forward's fixed order.
// Workspace: batch_norm_requirements(x).
Status batch_norm_moments(const TensorView& x, const TensorView& packet, const Workspace& workspace,
                          cudaStream_t stream);

// Merges `packets` [R][C][3] in rank order (Chan's formula, float64) into save_mean and
// save_invstd = 1 / sqrt(biased variance + eps) over the total count, and updates running_mean /
// running_var (both or neither; may be null) with options.momentum, the variance unbiased over the
// total count. save_mean, save_invstd and the running statistics: [C], the accumulation type of
// `dtype` (the dtype of x: float32, or float64 for float64 x). A total count of 0 gives NaN
// statistics and leaves the running statistics alone; a total count of 1 gives a NaN running
// variance (torch refuses that batch on one GPU; the ranks cannot see it without a sync).
// No workspace.
Status batch_norm_merge_moments(const TensorView& packets, DType dtype, const TensorView* running_mean,
                                const TensorView* running_var, const BatchNormOptions& options,
                                const TensorView& save_mean, const TensorView& save_invstd, cudaStream_t stream);

// y = (x - mean) * invstd * weight + bias per channel, from given statistics (the merged ones);
// weight, bias may be null. mean, invstd: [C] in the accumulation type. y as in the training
// forward (x's sizes, dtype and strides; may be x itself). Workspace: batch_norm_requirements(x).
Status batch_norm_apply(const TensorView& x, const TensorView* weight, const TensorView* bias, const TensorView& mean,
                        const TensorView& invstd, const TensorView& y, const Workspace& workspace,
                        cudaStream_t stream);

// This rank's gradient packet [C][3]: (count, sum(dy), sum(dy * xhat)), xhat = (x - save_mean) *
// save_invstd, from the (merged) statistics of the forward. dweight and dbias (may be null)
// receive this rank's sum(dy * xhat) and sum(dy): the gradients of the rank's own batch, as
// torch's SyncBatchNorm gives them (the data-parallel wrapper then reduces the parameters'
// gradients). Workspace: batch_norm_requirements(x).
Status batch_norm_backward_sums(const TensorView& dy, const TensorView& x, const TensorView& save_mean,
                                const TensorView& save_invstd, const TensorView& packet, const TensorView* dweight,
                                const TensorView* dbias, const Workspace& workspace, cudaStream_t stream);

// dx = weight * invstd * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n), the sums and n over
// all ranks' gradient packets [R][C][3], added in rank order. Workspace: batch_norm_requirements(x).
Status batch_norm_backward_apply(const TensorView& dy, const TensorView& x, const TensorView* weight,
                                 const TensorView& save_mean, const TensorView& save_invstd,
                                 const TensorView& packets, const TensorView& dx, const Workspace& workspace,
                                 cudaStream_t stream);

}  // namespace reducekit
