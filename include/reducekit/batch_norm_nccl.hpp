// SPDX-License-Identifier: Apache-2.0
// SyncBatchNorm over NCCL: batch_norm's training forward and backward for a batch spread over the
// ranks of an NCCL communicator, one rank a GPU. Each call runs the stages of
// <reducekit/batch_norm.hpp> around one ncclAllGather of the small per-channel packets (24 bytes
// a channel a rank), merging them in rank order: every rank gets bit-identical statistics. Batch
// sizes may differ between ranks, 0 included. Part of the library reducekit_nccl (built where
// CMake finds NCCL); link it beside reducekit.
//
// Every rank must make the same calls in the same order (the collectives pair up by order) with
// the same C, dtype and options; tensors are as in the single-GPU functions. Everything is
// enqueued on `stream`; nothing synchronizes the host, so the calls can be captured in a CUDA
// graph where NCCL allows it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "reducekit/batch_norm.hpp"
#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

// Workspace of a sync forward or backward on this rank's x: the single-GPU workspace, then the
// gathered packets of every rank of `comm` (none of it needs zeroing).
Status sync_batch_norm_requirements(const TensorView& x, ncclComm_t comm, BatchNormRequirements* req);

// batch_norm_training_forward's outputs with the statistics of the whole batch (every rank's x):
// save_mean / save_invstd (identical on every rank), y for this rank's x, the running statistics
// updated from the merged statistics (the variance unbiased over the total count). An empty total
// batch leaves NaN statistics; an empty x on one rank is fine.
Status sync_batch_norm_training_forward(const TensorView& x, const TensorView* weight, const TensorView* bias,
                                        const TensorView* running_mean, const TensorView* running_var,
                                        const BatchNormOptions& options, const TensorView& y,
                                        const TensorView& save_mean, const TensorView& save_invstd,
                                        const Workspace& workspace, ncclComm_t comm, cudaStream_t stream);

// The backward of sync_batch_norm_training_forward: dx for this rank's x, with the statistics'
// dependence on every rank's x (the sums of dy and dy * xhat gathered from all ranks); dweight
// and dbias are this rank's own sums, as torch's SyncBatchNorm returns them (a data-parallel
// wrapper reduces parameter gradients). dx, dweight, dbias: each may be null; the gather runs
// whenever dx is wanted, so every rank must then want dx.
Status sync_batch_norm_backward(const TensorView& dy, const TensorView& x, const TensorView* weight,
                                const TensorView& save_mean, const TensorView& save_invstd, const TensorView* dx,
                                const TensorView* dweight, const TensorView* dbias, const Workspace& workspace,
                                ncclComm_t comm, cudaStream_t stream);

}  // namespace reducekit
