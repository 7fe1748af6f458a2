// SPDX-License-Identifier: Apache-2.0
// Host side of the reduction engine: launches the kernel a ReduceConfig names for one policy and
// element type, and dispatches on the element type. Included by the per-statistic .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/reduce_engine.cuh"
#include "ops/launch.hpp"
#include "ops/reduce_dispatch.hpp"

namespace reducekit {
namespace detail {

template <class P, typename T, bool kAligned>
Status launch_row_warp(const kernels::ReduceArgs& a, int lanes, unsigned grid, cudaStream_t stream) {
  using namespace kernels;
  if (lanes < 1 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    return Status::unsupported("reduce plan: warp rows of " + std::to_string(lanes) + " lanes (a power of two up to 32)");
  reduce_row_warp_kernel<P, T, kAligned><<<grid, kReduceThreads, 0, stream>>>(a, lanes);
  return launch_status("reduce_row_warp_kernel");
}

// kAligned: every row (run) of x starts 16-byte aligned; else rows load as their own alignment
// allows (vector_io.cuh). The same arithmetic either way.
template <class P, typename T, bool kAligned> Status launch_policy_aligned(const ReduceLaunch& l, cudaStream_t stream) {
  using namespace kernels;
  const ReduceConfig& c = l.config;
  const unsigned grid = static_cast<unsigned>(c.grid);
  switch (c.kernel) {
    case ReduceKernel::kNothing:
      return Status::ok();
    case ReduceKernel::kFill:
      reduce_fill_kernel<P><<<grid, kReduceThreads, 0, stream>>>(l.args, l.out_numel);
      return launch_status("reduce_fill_kernel");
    case ReduceKernel::kRowWarp:
      return launch_row_warp<P, T, kAligned>(l.args, c.lanes, grid, stream);
    case ReduceKernel::kRowBlock:
      reduce_row_block_kernel<P, T, kAligned><<<grid, kReduceThreads, 0, stream>>>(l.args);
      return launch_status("reduce_row_block_kernel");
    case ReduceKernel::kColumn:
      if (c.column_row_lanes == 1) {
        reduce_column_kernel<P, T, 1, 1, kAligned><<<grid, kReduceThreads, 0, stream>>>(l.args);
        return launch_status("reduce_column_kernel");
      }
      if constexpr (kAligned && kColumnWideFits<P, T>) {  // the planner's rule: aligned rows only
        if (c.column_wide) {
          // Twice the columns a CTA: half the plan's tiles (and tickets), the same bits.
          ReduceArgs wide = l.args;
          wide.tiles = (c.tiles + kColumnWideLanesPerThread - 1) / kColumnWideLanesPerThread;
          const auto wide_grid = static_cast<unsigned>(std::min(wide.outer * wide.tiles * c.parts, kMaxGrid));
          reduce_column_kernel<P, T, kColumnRowLanes, kColumnWideLanesPerThread, kAligned>
              <<<wide_grid, kReduceThreads, 0, stream>>>(wide);
          return launch_status("reduce_column_kernel");
        }
      }
      reduce_column_kernel<P, T, kColumnRowLanes, 1, kAligned><<<grid, kReduceThreads, 0, stream>>>(l.args);
      return launch_status("reduce_column_kernel");
    case ReduceKernel::kAll:
      reduce_all_kernel<P, T, kAligned><<<grid, kReduceThreads, 0, stream>>>(l.args);
      return launch_status("reduce_all_kernel");
  }
  return Status::unsupported("x: no reduction kernel for this problem");
}

template <class P, typename T> Status launch_policy(const ReduceLaunch& l, cudaStream_t stream) {
  if (l.args.aligned) return launch_policy_aligned<P, T, true>(l, stream);
  return launch_policy_aligned<P, T, false>(l, stream);
}

}  // namespace detail

// Binds the flag of a policy template (max or min), for launch_for_dtype.
template <template <typename, bool> class PolicyFor, bool kFlag> struct WithFlag {
  template <typename Acc> using Policy = PolicyFor<Acc, kFlag>;
};

// PolicyFor<Acc> for each element type of x; float64 accumulation of narrower inputs only where
// kDoubleAccumulate allows it (sum and mean), so the other statistics are not compiled for it.
template <template <typename> class PolicyFor, bool kDoubleAccumulate = false>
Status launch_for_dtype(const ReduceLaunch& l, cudaStream_t stream) {
  using detail::launch_policy;
  const bool wide = kDoubleAccumulate && l.double_accumulate;
  switch (l.x_type) {
    case DType::kFloat32:
      if constexpr (kDoubleAccumulate) if (wide) return launch_policy<PolicyFor<double>, float>(l, stream);
      return launch_policy<PolicyFor<float>, float>(l, stream);
    case DType::kFloat16:
      if constexpr (kDoubleAccumulate) if (wide) return launch_policy<PolicyFor<double>, __half>(l, stream);
      return launch_policy<PolicyFor<float>, __half>(l, stream);
    case DType::kBFloat16:
      if constexpr (kDoubleAccumulate) if (wide) return launch_policy<PolicyFor<double>, __nv_bfloat16>(l, stream);
      return launch_policy<PolicyFor<float>, __nv_bfloat16>(l, stream);
    case DType::kFloat64:
      return launch_policy<PolicyFor<double>, double>(l, stream);
    default:
      return Status::invalid_argument("x: expected float32, float16, bfloat16 or float64");
  }
}

}  // namespace reducekit
