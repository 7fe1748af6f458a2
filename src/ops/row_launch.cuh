// Host side of the row engine: picks the kernel instantiation a RowKernelConfig names and
// launches it. Every per-row op (softmax today, norms next) goes through launch_row_op.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/row_engine.cuh"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/status.hpp"

namespace reducekit {

template <typename T, class Op> using RowArgsFor = kernels::RowArgs<T, Op::kInputs>;

// Device limits the planner needs, read from the current device (cheap: cached by the driver).
inline Status row_kernel_limits(RowKernelLimits* limits) {
  int device = 0, smem_optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return Status::cuda_error(std::string("device query failed: ") + cudaGetErrorString(cudaGetLastError()));
  // Keep 2 KB for the kernel's own reduction slots and the per-CTA reservation.
  limits->max_smem_per_block = static_cast<std::size_t>(std::max(0, smem_optin - 2048));
  // Tuning knobs for benchmark sweeps only; the defaults above are what ships.
  if (const char* v = std::getenv("REDUCEKIT_TUNE_MAX_CLUSTER")) limits->max_cluster = std::atoi(v);
  if (const char* v = std::getenv("REDUCEKIT_TUNE_MAX_BLOCK_THREADS"))
    limits->max_block_threads = std::min(std::atoi(v), kernels::kMaxBlockThreads);
  return Status::ok();
}

namespace detail {

// Elements per 16-byte vector: the planner's and the kernels' unit of work.
template <typename T> constexpr int kVec = 16 / sizeof(T);

template <typename T, class Op, int VEC, bool kAligned>
auto pick_warp_kernel(int lanes, int vpt) {
  if (vpt == 2) return kernels::row_warp_kernel<T, Op, VEC, 2, 32, kAligned>;
  if (vpt > 2) return kernels::row_warp_kernel<T, Op, VEC, 4, 32, kAligned>;
  switch (lanes) {
    case 4: return kernels::row_warp_kernel<T, Op, VEC, 1, 4, kAligned>;
    case 8: return kernels::row_warp_kernel<T, Op, VEC, 1, 8, kAligned>;
    case 16: return kernels::row_warp_kernel<T, Op, VEC, 1, 16, kAligned>;
    default: return kernels::row_warp_kernel<T, Op, VEC, 1, 32, kAligned>;
  }
}

// The largest instantiated tile with at most `vpt` vectors a thread, up to the planner's cap
// for this dtype and input count (larger tiles would spill).
template <typename T, class Op, int VEC, bool kAligned, int VPT = 16>
auto pick_block_kernel(int vpt) {
  constexpr int kAccWords = sizeof(kernels::acc_t<T>) / sizeof(float);
  constexpr int kMaxVpt = kRowTileWords / (VEC * kAccWords * Op::kInputs);
  if constexpr (VPT == 1) {
    return kernels::row_block_kernel<T, Op, VEC, 1, kAligned>;
  } else if constexpr (VPT > kMaxVpt) {
    return pick_block_kernel<T, Op, VEC, kAligned, VPT / 2>(vpt);
  } else {
    if (vpt >= VPT) return kernels::row_block_kernel<T, Op, VEC, VPT, kAligned>;
    return pick_block_kernel<T, Op, VEC, kAligned, VPT / 2>(vpt);
  }
}

inline Status launch_status(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status::cuda_error(std::string(what) + " launch failed: " + cudaGetErrorString(err));
}

template <typename T, class Op, bool kAligned>
Status launch_row_op_aligned(const RowArgsFor<T, Op>& args, const RowKernelConfig& c, cudaStream_t stream) {
  constexpr int64_t kMaxGrid = 0x7fffffff;
  if (c.kind == RowKernelKind::kWarp) {
    const int64_t rows_per_block = kernels::kWarpKernelThreads / c.lanes;
    const int64_t grid = std::min((args.rows + rows_per_block - 1) / rows_per_block, kMaxGrid);
    pick_warp_kernel<T, Op, kVec<T>, kAligned>(c.lanes, c.vpt)<<<static_cast<unsigned>(grid), kernels::kWarpKernelThreads, 0,
                                                   stream>>>(args);
    return launch_status("row_warp_kernel");
  }
  auto kernel = pick_block_kernel<T, Op, kVec<T>, kAligned>(c.vpt);
  const int64_t grid = std::min(args.rows, kMaxGrid / c.cluster) * c.cluster;
  if (c.smem_bytes > 48 * 1024 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(c.smem_bytes)) !=
          cudaSuccess)
    return launch_status("row_block_kernel shared-memory setup");
  if (c.cluster == 1) {
    // A plain launch: cluster launches schedule CTAs more slowly, which short rows feel.
    kernel<<<static_cast<unsigned>(grid), c.threads, c.smem_bytes, stream>>>(args, c.tiles, c.stash_tiles);
    return launch_status("row_block_kernel");
  }
  if (c.cluster > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
    return launch_status("row_block_kernel cluster setup");
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(c.threads);
  config.dynamicSmemBytes = c.smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = c.cluster;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args, c.tiles, c.stash_tiles);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the Status carries the error now
    return Status::cuda_error(std::string("row_block_kernel launch failed: ") + cudaGetErrorString(err));
  }
  return launch_status("row_block_kernel");
}

}  // namespace detail

// Launches Op over args.rows rows of args.cols elements with the configuration plan_row_kernel
// gave for cols. `aligned` says whether every row start of every array is 16-byte aligned;
// it changes how elements move, never which thread combines them.
template <typename T, class Op>
Status launch_row_op(const RowArgsFor<T, Op>& args, const RowKernelConfig& c, bool aligned, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) return Status::ok();
  if (aligned) return detail::launch_row_op_aligned<T, Op, true>(args, c, stream);
  return detail::launch_row_op_aligned<T, Op, false>(args, c, stream);
}

}  // namespace reducekit
