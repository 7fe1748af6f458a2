// SPDX-License-Identifier: Apache-2.0
// Host side of the split-row kernel (src/kernels/row_split.cuh): a cooperative launch of at
// most the resident CTAs, or nothing when the device cannot guarantee them all at once (the
// caller then runs the stream kernel the same plan names).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/row_split.cuh"
#include "ops/checks.hpp"
#include "ops/row_launch.cuh"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/status.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

// Where a split launch keeps its per-row arrival counters (zero on entry, left zero) and its
// chunk statistics; laid out as row_split_workspace says.
struct RowSplitBuffers {
  unsigned* counters = nullptr;
  void* partials = nullptr;
};

// The split buffers of a call's workspace: none (the stream kernel runs split rows) when the
// caller gave none (null, or neither data nor tickets); else checked against what the plan
// needs for `rows` rows of `stat_bytes` statistics (errors name "workspace").
inline Status split_buffers(const Workspace* workspace, const RowKernelConfig& c, int64_t rows, std::size_t stat_bytes,
                            RowSplitBuffers* buffers) {
  *buffers = {};
  if (workspace == nullptr || (workspace->data == nullptr && workspace->tickets == nullptr)) return Status::ok();
  const RowSplitWorkspace need = row_split_workspace(c, rows, stat_bytes);
  REDUCEKIT_RETURN_IF_ERROR(check_workspace(*workspace, need.bytes, need.zeroed_bytes));
  if (need.bytes == 0) return Status::ok();
  const WorkspaceRegions regions = workspace_regions(*workspace, need.zeroed_bytes);
  buffers->counters = static_cast<unsigned*>(regions.zeroed);
  buffers->partials = regions.rest;
  return Status::ok();
}

namespace detail {

// Whether the current device launches cooperative grids.
inline Status cooperative_launch_supported(bool* supported) {
  DeviceAttributes device;
  REDUCEKIT_RETURN_IF_ERROR(current_device_attributes(&device));
  *supported = device.cooperative;
  return Status::ok();
}

// The split kernel of plain ops (no Extra) or of extended ones (one Extra argument).
// Its tiles: kRowSplitVpt vectors a thread on chip, reread_split_vpt re-read.
template <typename T, class Op, bool kReread>
constexpr int kSplitVpt = kReread ? reread_split_vpt(sizeof(T), Op::kInputs) : kRowSplitVpt;
template <typename T, class Op, int VEC, bool kAligned, bool kReread, class... Extra> auto split_kernel() {
  constexpr int vpt = kSplitVpt<T, Op, kReread>;
  if constexpr (sizeof...(Extra) == 0) return kernels::row_split_kernel<T, Op, VEC, vpt, kAligned, kReread>;
  else return kernels::row_split_kernel_ext<T, Op, VEC, vpt, kAligned, kReread>;
}

// Launches the split kernel when the device keeps at least one CTA a chunk of a row resident;
// `launched` says whether it did. Whether it does depends on the device and the plan (row
// length, dtype), never on the row count, so a row's path, and its bits, are batch-invariant.
template <typename T, class Op, bool kAligned, bool kReread, class... Extra>
Status launch_row_split(const RowArgsFor<T, Op>& args, const RowKernelConfig& c, const RowSplitBuffers& buffers,
                        cudaStream_t stream, bool* launched, const Extra&... extra) {
  *launched = false;
  const RowSplitConfig& s = c.split;
  if (s.vpt != kSplitVpt<T, Op, kReread> || s.threads != kRowSplitThreads || s.chunk_tiles < 1 ||
      (s.reread ? s.ring != 0 || s.smem_bytes != 0 : s.ring < 2 || s.ring > 4))
    return Status::unsupported("row plan: split rows need the instantiated tile and a ring of 2 .. 4 chunks "
                               "(re-read ones none)");
  bool cooperative = false;
  REDUCEKIT_RETURN_IF_ERROR(cooperative_launch_supported(&cooperative));
  if (!cooperative) return Status::ok();
  auto kernel = split_kernel<T, Op, kVec<T>, kAligned, kReread, Extra...>();
  REDUCEKIT_RETURN_IF_ERROR(allow_smem(kernel, s.smem_bytes, "row_split_kernel"));
  int resident = 0;
  REDUCEKIT_RETURN_IF_ERROR(resident_ctas(reinterpret_cast<const void*>(kernel), s.threads, s.smem_bytes, &resident));
  if (resident < s.chunks) return Status::ok();  // a CTA could wait for a chunk nobody runs

  // More CTAs than items would only spin up and leave.
  const int64_t grid = std::min<int64_t>(resident, args.rows * s.chunks);
  const kernels::RowSplitArgs split{buffers.counters, buffers.partials, s.chunks, s.chunk_tiles, s.ring};
  cudaLaunchAttribute all_resident = {};
  all_resident.id = cudaLaunchAttributeCooperative;  // all CTAs resident together, or no launch
  all_resident.val.cooperative = 1;
  *launched = true;  // tried: a failed launch is an error, not a reason to fall back
  return launch_with_attribute(kernel, grid, s.threads, s.smem_bytes, stream, all_resident, "row_split_kernel", args,
                               extra..., split);
}

}  // namespace detail

// launch_row_op (row_launch.cuh), plain or with the op's Extra, with split rows when the plan
// has them and the caller gave their buffers; otherwise (no buffers, no cooperative launch, too
// few resident CTAs) the plan's stream kernel runs the row.
template <RowFamily F, typename T, class Op, class... Extra>
Status launch_row_op_split(const RowArgsFor<T, Op>& args, const RowKernelConfig& c, bool aligned,
                           const RowSplitBuffers& buffers, cudaStream_t stream, const Extra&... extra) {
  if (args.rows == 0 || args.cols == 0) return Status::ok();
  if (c.split.chunks > 0 && buffers.counters != nullptr && buffers.partials != nullptr) {
    bool launched = false;
    const auto launch = [&](auto aligned_tag, auto reread_tag) {
      return detail::launch_row_split<T, Op, decltype(aligned_tag)::value, decltype(reread_tag)::value>(
          args, c, buffers, stream, &launched, extra...);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (c.split.reread) REDUCEKIT_RETURN_IF_ERROR(aligned ? launch(Yes{}, Yes{}) : launch(No{}, Yes{}));
    else REDUCEKIT_RETURN_IF_ERROR(aligned ? launch(Yes{}, No{}) : launch(No{}, No{}));
    if (launched) return Status::ok();
  }
  return launch_row_op<F, T, Op>(args, extra..., c, aligned, stream);
}

}  // namespace reducekit
