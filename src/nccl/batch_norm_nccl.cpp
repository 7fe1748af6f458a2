// SPDX-License-Identifier: Apache-2.0
// SyncBatchNorm over NCCL: the stages of <reducekit/batch_norm.hpp> around one in-place
// ncclAllGather each way. The workspace holds the single-GPU workspace, then [R][C][3] gathered
// packets; this rank writes its packet straight into its own slot (NCCL's in-place form, send
// buffer = receive buffer + rank * count).
#include "reducekit/batch_norm_nccl.hpp"

#include <cstdint>
#include <string>

#include "plan/batch_norm_plan.hpp"

namespace reducekit {
namespace {

static_assert(kSyncBatchNormPacketWidth == kBatchNormPacketWidth, "the plan's packet is the API's");

Status nccl_status(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return Status::ok();
  return Status::cuda_error(std::string(call) + " failed: " + ncclGetErrorString(r));
}

// The communicator's size and this rank's place in it.
Status ranks_of(ncclComm_t comm, int* ranks, int* rank) {
  if (comm == nullptr) return Status::invalid_argument("comm: must not be null");
  REDUCEKIT_RETURN_IF_ERROR(nccl_status(ncclCommCount(comm, ranks), "ncclCommCount"));
  return nccl_status(ncclCommUserRank(comm, rank), "ncclCommUserRank");
}

// Where the workspace keeps the single-GPU part and the gathered packets.
struct SyncWorkspace {
  Workspace local;      // batch_norm_requirements(x)
  TensorView gathered;  // [R][C][3] float64
  TensorView mine;      // [C][3], row `rank` of gathered
};

Status sync_workspace_plan(const TensorView& x, int ranks, SyncBatchNormWorkspace* plan) {
  BatchNormRequirements req;
  REDUCEKIT_RETURN_IF_ERROR(batch_norm_requirements(x, &req));  // x is [N, C, *] from here on
  return plan_sync_batch_norm_workspace(req.workspace_bytes, ranks, x.sizes[1], plan);
}

Status bind(const TensorView& x, ncclComm_t comm, const Workspace& ws, SyncWorkspace* out, int* ranks) {
  int rank = 0;
  REDUCEKIT_RETURN_IF_ERROR(ranks_of(comm, ranks, &rank));
  SyncBatchNormWorkspace plan;
  REDUCEKIT_RETURN_IF_ERROR(sync_workspace_plan(x, *ranks, &plan));
  if (ws.bytes < plan.bytes || (plan.bytes > 0 && ws.data == nullptr))
    return Status::invalid_argument("workspace: " + std::to_string(ws.bytes) + " bytes, sync_batch_norm needs " +
                                    std::to_string(plan.bytes));
  if (reinterpret_cast<std::uintptr_t>(ws.data) % 16 != 0)
    return Status::invalid_argument("workspace: must be 16-byte aligned");
  const int64_t c = x.sizes[1];
  auto* packets = reinterpret_cast<double*>(static_cast<unsigned char*>(ws.data) + plan.packets_offset);
  out->local = Workspace{ws.data, plan.packets_offset};
  out->gathered = make_contiguous_view(packets, DType::kFloat64, {*ranks, c, kBatchNormPacketWidth}, x.device);
  out->mine = make_contiguous_view(packets + static_cast<int64_t>(rank) * c * kBatchNormPacketWidth,
                                   DType::kFloat64, {c, kBatchNormPacketWidth}, x.device);
  return Status::ok();
}

// Every rank's packet into every rank's `gathered`, in place.
Status gather(const SyncWorkspace& w, ncclComm_t comm, cudaStream_t stream) {
  const std::size_t count = static_cast<std::size_t>(w.mine.numel());
  return nccl_status(ncclAllGather(w.mine.data, w.gathered.data, count, ncclFloat64, comm, stream), "ncclAllGather");
}

}  // namespace

Status sync_batch_norm_requirements(const TensorView& x, ncclComm_t comm, BatchNormRequirements* req) {
  if (req == nullptr) return Status::invalid_argument("req: must not be null");
  int ranks = 0, rank = 0;
  REDUCEKIT_RETURN_IF_ERROR(ranks_of(comm, &ranks, &rank));
  SyncBatchNormWorkspace plan;
  REDUCEKIT_RETURN_IF_ERROR(sync_workspace_plan(x, ranks, &plan));
  req->workspace_bytes = plan.bytes;
  req->workspace_zeroed_bytes = 0;
  return Status::ok();
}

Status sync_batch_norm_training_forward(const TensorView& x, const TensorView* weight, const TensorView* bias,
                                        const TensorView* running_mean, const TensorView* running_var,
                                        const BatchNormOptions& options, const TensorView& y,
                                        const TensorView& save_mean, const TensorView& save_invstd,
                                        const Workspace& workspace, ncclComm_t comm, cudaStream_t stream) {
  SyncWorkspace w;
  int ranks = 0;
  REDUCEKIT_RETURN_IF_ERROR(bind(x, comm, workspace, &w, &ranks));
  REDUCEKIT_RETURN_IF_ERROR(batch_norm_moments(x, w.mine, w.local, stream));
  REDUCEKIT_RETURN_IF_ERROR(gather(w, comm, stream));
  REDUCEKIT_RETURN_IF_ERROR(
      batch_norm_merge_moments(w.gathered, x.dtype, running_mean, running_var, options, save_mean, save_invstd, stream));
  return batch_norm_apply(x, weight, bias, save_mean, save_invstd, y, w.local, stream);
}

Status sync_batch_norm_backward(const TensorView& dy, const TensorView& x, const TensorView* weight,
                                const TensorView& save_mean, const TensorView& save_invstd, const TensorView* dx,
                                const TensorView* dweight, const TensorView* dbias, const Workspace& workspace,
                                ncclComm_t comm, cudaStream_t stream) {
  SyncWorkspace w;
  int ranks = 0;
  REDUCEKIT_RETURN_IF_ERROR(bind(x, comm, workspace, &w, &ranks));
  REDUCEKIT_RETURN_IF_ERROR(
      batch_norm_backward_sums(dy, x, save_mean, save_invstd, w.mine, dweight, dbias, w.local, stream));
  if (dx == nullptr) return Status::ok();
  REDUCEKIT_RETURN_IF_ERROR(gather(w, comm, stream));
  return batch_norm_backward_apply(dy, x, weight, save_mean, save_invstd, w.gathered, *dx, w.local, stream);
}

}  // namespace reducekit
