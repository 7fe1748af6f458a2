// SPDX-License-Identifier: Apache-2.0
// Host side of the row engine: picks the kernel instantiation a RowKernelConfig names and
// launches it. Every per-row op goes through launch_row_op but the cross-entropy, whose kernels
// and launcher (cross_entropy.cuh, cross_entropy.cu) are built from the engine's pieces.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/row_engine.cuh"
#include "kernels/row_staged.cuh"
#include "kernels/row_stream.cuh"
#include "kernels/row_wide.cuh"
#include "ops/checks.hpp"
#include "ops/launch.hpp"
#include "plan/launch_limits.hpp"
#include "plan/reduction_plan.hpp"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/tuning.hpp"
#include "reducekit/status.hpp"

namespace reducekit {

template <typename T, class Op> using RowArgsFor = kernels::RowArgs<T, Op::kInputs>;

// Rows the kernels take: at most kMaxRowLength elements, in-row indices in int. Every caller
// checks its rows (naming the argument `name`) before row_args, which keeps the length in int.
inline Status check_row_length(int64_t cols, const char* name) {
  if (cols <= kMaxRowLength) return Status::ok();
  return Status::unsupported(std::string(name) + ": rows longer than " + std::to_string(kMaxRowLength) +
                             " elements are not supported");
}

// Kernel arguments for NIN input arrays and one output, each with the row plan plan_rowwise
// gave it (rows and row length from the first input's plan, checked by check_row_length).
template <typename T, int NIN>
kernels::RowArgs<T, NIN> row_args(const void* const (&in)[NIN], const RowwisePlan* in_plans, void* out,
                                  const RowwisePlan& out_plan) {
  kernels::RowArgs<T, NIN> args;
  for (int i = 0; i < NIN; ++i) {
    args.in[i] = static_cast<const T*>(in[i]);
    args.in_stride[i] = in_plans[i].row_stride;
  }
  args.out = static_cast<T*>(out);
  args.out_stride = out_plan.row_stride;
  args.rows = in_plans[0].rows;
  args.cols = static_cast<int>(in_plans[0].cols);
  return args;
}

// Device limits the planner needs, of the current device (queried once a device).
inline Status row_kernel_limits(RowKernelLimits* limits) {
  DeviceAttributes device;
  REDUCEKIT_RETURN_IF_ERROR(current_device_attributes(&device));
  limits->max_smem_per_block =
      static_cast<std::size_t>(std::max<int64_t>(0, device.smem_optin - int64_t(kRowKernelStaticSmemBytes)));
  limits->max_smem_per_sm = static_cast<std::size_t>(device.smem_per_sm);
  limits->sm_count = device.sms;
  // Overrides a sweep or test set explicitly (reducekit/tuning.hpp); none by default.
  const auto set = [](const char* name, auto* field) {
    if (const auto v = tuning(name)) *field = static_cast<std::remove_pointer_t<decltype(field)>>(*v);
  };
  set("max_cluster", &limits->max_cluster);
  set("max_block_threads", &limits->max_block_threads);
  // A warp at least: the planner clamps between 32 and this cap.
  limits->max_block_threads = std::clamp(limits->max_block_threads, 32, kernels::kMaxBlockThreads);
  set("block_elems", &limits->block_elems);
  set("min_block_threads", &limits->min_block_threads);
  set("ring", &limits->ring);
  set("two_phase", &limits->two_phase);
  set("l2_hints_from_bytes", &limits->l2_hints_from_bytes);
  set("wide_rows", &limits->wide_rows);
  set("wide_above_threads", &limits->wide_above_threads);
  set("wide_max_threads", &limits->wide_max_threads);
  limits->wide_max_threads = std::min(limits->wide_max_threads, kWideRowThreads);
  set("wide_lean_max_threads", &limits->wide_lean_max_threads);
  set("wide_whole_above_threads", &limits->wide_whole_above_threads);
  set("wide_partial_max_threads", &limits->wide_partial_max_threads);
  set("wide_roomy_max_threads", &limits->wide_roomy_max_threads);
  set("wide_whole_roomy_max_threads", &limits->wide_whole_roomy_max_threads);
  set("wide_mid_max_threads", &limits->wide_mid_max_threads);
  set("wide_fill_above_threads", &limits->wide_fill_above_threads);
  set("read_back_second", &limits->read_back_second);
  set("loads_ahead", &limits->loads_ahead);
  set("max_tile_values", &limits->max_tile_values);
  set("split_chunk_tiles", &limits->split_chunk_tiles);
  set("split_ring", &limits->split_ring);
  limits->split_ring = std::clamp(limits->split_ring, 2, 4);
  set("split_min_cluster", &limits->split_min_cluster);
  set("split_max_elem_bytes", &limits->split_max_elem_bytes);
  set("split_reread_from_bytes", &limits->split_reread_from_bytes);
  set("split_reread_min_chunk_tiles", &limits->split_reread_min_chunk_tiles);
  set("reread_above_words", &limits->reread_above_words);
  set("reread_ragged_lengths_only", &limits->reread_ragged_lengths_only);
  set("reread_small_tiles_from_bytes", &limits->reread_small_tiles_from_bytes);
  set("reread_stash_bytes", &limits->reread_stash_bytes);
  static_assert(kMaxStagedBands == 4, "a band's settings are named staged0_* .. staged3_*");
  const char* const band_names[kMaxStagedBands][5] = {
      {"staged0_min_bytes", "staged0_max_bytes", "staged0_threads", "staged0_share_bytes", "staged0_ragged_only"},
      {"staged1_min_bytes", "staged1_max_bytes", "staged1_threads", "staged1_share_bytes", "staged1_ragged_only"},
      {"staged2_min_bytes", "staged2_max_bytes", "staged2_threads", "staged2_share_bytes", "staged2_ragged_only"},
      {"staged3_min_bytes", "staged3_max_bytes", "staged3_threads", "staged3_share_bytes", "staged3_ragged_only"}};
  for (int b = 0; b < kMaxStagedBands; ++b) {
    StagedBand& band = limits->staged[b];
    set(band_names[b][0], &band.min_row_bytes);
    set(band_names[b][1], &band.max_row_bytes);
    set(band_names[b][2], &band.threads);
    set(band_names[b][3], &band.share_bytes);
    set(band_names[b][4], &band.ragged_lengths_only);
  }
  return Status::ok();
}

// Whether every one of `rows` rows (at `row_stride` elements of `elem_bytes`) starts on a 16-byte
// granule, as whole-vector accesses need.
inline bool rows_on_granules(const void* data, int64_t rows, int64_t row_stride, int elem_bytes) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && (rows <= 1 || row_stride % (16 / elem_bytes) == 0);
}

namespace detail {

// Elements per 16-byte vector: the planner's and the kernels' unit of work.
template <typename T> constexpr int kVec = 16 / sizeof(T);

// A row kernel of the plain interface (no Extra) or of the extended one (one Extra argument),
// named without instantiating one.
template <typename T, class Op, class... Extra> using RowKernel = void (*)(kernels::RowArgs<T, Op::kInputs>, Extra...);

// Kernels of the plain interface (no Extra) or of the extended one (one Extra argument).
template <typename T, class Op, int VEC, int VPT, int LANES, bool kAligned, class... Extra> auto warp_kernel() {
  if constexpr (sizeof...(Extra) == 0) return kernels::row_warp_kernel<T, Op, VEC, VPT, LANES, kAligned>;
  else return kernels::row_warp_kernel_ext<T, Op, VEC, VPT, LANES, kAligned>;
}

// Warp kernels take the lane count last (used where their LANES is 0).
template <typename T, class Op, class... Extra>
using WarpKernel = void (*)(kernels::RowArgs<T, Op::kInputs>, Extra..., int);

// The warp kernel of `lanes` lanes and `vpt` vectors a lane, null where kTiles builds none.
// One-vector tiles take their lane count at run time (one kernel for 4 to 32 lanes); larger
// tiles are planned on whole warps only.
template <typename T, class Op, int VEC, bool kAligned, unsigned kTiles, class... Extra>
WarpKernel<T, Op, Extra...> pick_warp_kernel(int lanes, int vpt) {
  using Kernel = WarpKernel<T, Op, Extra...>;
  if (vpt == 2) {
    if constexpr (has_row_vpt(kTiles, 2)) return warp_kernel<T, Op, VEC, 2, 32, kAligned, Extra...>();
    return Kernel{};
  }
  if (vpt > 2) {
    if constexpr (has_row_vpt(kTiles, 4)) return warp_kernel<T, Op, VEC, 4, 32, kAligned, Extra...>();
    return Kernel{};
  }
  if constexpr (!has_row_vpt(kTiles, 1)) return Kernel{};
  else return lanes >= 4 && lanes <= 32 && (lanes & (lanes - 1)) == 0 ? warp_kernel<T, Op, VEC, 1, 0, kAligned, Extra...>()
                                                                      : Kernel{};
}

// Kernel families with a VPT (vectors per thread) parameter, for pick_tile.
template <typename T, class Op, int VEC, bool kAligned, bool kCluster, class... Extra> struct BlockKernels {
  using Kernel = RowKernel<T, Op, Extra...>;
  template <int VPT> static auto get() {
    if constexpr (sizeof...(Extra) == 0) return kernels::row_block_kernel<T, Op, VEC, VPT, kAligned, kCluster>;
    else return kernels::row_block_kernel_ext<T, Op, VEC, VPT, kAligned, kCluster>;
  }
};
// kBulkStash: re-read rows' stash (bulk copies); held rows' stash takes cp.async.
template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kBulkStash, class... Extra> auto stream_kernel() {
  if constexpr (sizeof...(Extra) == 0) return kernels::row_stream_kernel<T, Op, VEC, VPT, kAligned, kBulkStash>;
  else return kernels::row_stream_kernel_ext<T, Op, VEC, VPT, kAligned, kBulkStash>;
}
// Wide rows are planned for the norm forwards (ops of the extended interface) only: plain ops
// have none built.
template <typename T, class Op, int VEC, bool kAligned, class... Extra> struct WideKernels {
  using Kernel = RowKernel<T, Op, Extra...>;
  template <int VPT> static Kernel get() {
    if constexpr (sizeof...(Extra) == 0) return nullptr;
    else return kernels::row_wide_kernel_ext<T, Op, VEC, VPT, kAligned>;
  }
};
// Wide rows whose tile crosses the reduction packed (row_wide_packed_kernel_ext; two-phase ops,
// row_wide_packed_two_phase_kernel_ext): 16-bit one-input one-output ops, and float32 two-phase
// ones (layer_norm: its unpacked kernel spilled 36 bytes, the packed one none, ptxas); ops that
// hold their inputs' sum (kernels::HoldsInputSum) count as one-input ones, float32 ones of
// either kind; aligned rows of whole vectors.
// Plain ops (no Extra) are never packed, and name no kOutputs.
template <typename T, class Op, class... Extra> constexpr bool packed_wide_rows() {
  if constexpr (sizeof...(Extra) != 1) return false;
  else {
    constexpr bool sums = kernels::HoldsInputSum<Op>::value;
    constexpr bool one_input = (Op::kInputs == 1 && Op::kOutputs == 1) || sums;
    return one_input && (sizeof(T) == 2 || (sizeof(T) == 4 && (kernels::IsTwoPhase<Op>::value || sums)));
  }
}
// kForm (RowKernelConfig::wide_form): the two-phase kernel has kBase and kLean, the one-statistic
// one kBase, kMid and kRoomy.
// kShiftedIn: x's rows off their granules, everything else on them (RowArgs::input_alone_shifted).
template <typename T, class Op, int VEC, WideForm kForm, bool kShiftedIn, class... Extra> struct WidePackedKernels {
  using Kernel = RowKernel<T, Op, Extra...>;
  template <int VPT> static auto get() {
    if constexpr (kernels::IsTwoPhase<Op>::value)
      return kernels::row_wide_packed_two_phase_kernel_ext<T, Op, VEC, VPT, kForm == WideForm::kLean, kShiftedIn>;
    else return kernels::row_wide_packed_kernel_ext<T, Op, VEC, VPT, kForm, kShiftedIn>;
  }
};
template <typename T, class Op, int VEC, bool kAligned, class... Extra> struct RingKernels {
  using Kernel = RowKernel<T, Op, Extra...>;
  template <int VPT> static auto get() {
    if constexpr (sizeof...(Extra) == 0) return kernels::row_ring_kernel<T, Op, VEC, VPT, kAligned>;
    else return kernels::row_ring_kernel_ext<T, Op, VEC, VPT, kAligned>;
  }
};

// The kernel of tiles of `vpt` vectors a thread, null where kTiles (within kMaxVpt, the
// planner's cap for the dtype and input count; larger tiles would spill) builds none.
template <class Kernels, unsigned kTiles, int kMaxVpt, int VPT = 16> typename Kernels::Kernel pick_tile(int vpt) {
  if constexpr (VPT > 1) {
    if constexpr (VPT <= kMaxVpt && has_row_vpt(kTiles, VPT)) {
      if (vpt == VPT) return Kernels::template get<VPT>();
    }
    return pick_tile<Kernels, kTiles, kMaxVpt, VPT - 1>(vpt);
  } else {
    if constexpr (has_row_vpt(kTiles, 1)) {
      if (vpt == 1) return Kernels::template get<1>();
    }
    return nullptr;
  }
}

inline Status no_row_kernel(const char* kernel, int vpt) {
  return Status::unsupported(std::string("row plan: no ") + kernel + " of " + std::to_string(vpt) +
                             " vectors a thread is built for this op and dtype (a planner override may plan one; "
                             "REDUCEKIT_ALL_ROW_TILES builds them all)");
}

// The most CTAs one launch's x dimension takes: the row kernels' grids stop here (the block
// kernels, one row a CTA or cluster, refuse more rows; the others loop over them).
constexpr int64_t kMaxRowGrid = kMaxGridX;

// The staged kernels' launch contract (row_staged.cuh, norm_staged.cuh, cross_entropy.cuh): CTAs
// of an instantiated size, a cluster of at most kPortableClusterSize CTAs a row (their cluster
// slots; the planner never stages past it) and one cluster a row in one grid. `tensor` names
// the input in the answer.
inline Status check_staged_launch(const RowKernelConfig& c, int64_t rows, const char* tensor) {
  if (c.threads != kStagedSmallThreads && c.threads != kStagedThreads)
    return Status::unsupported("row plan: staged CTAs of an uninstantiated size");
  if (c.cluster < 1 || c.cluster > kPortableClusterSize)
    return Status::unsupported("row plan: staged rows span 1 to " + std::to_string(kPortableClusterSize) + " CTAs");
  if (rows > kMaxRowGrid / c.cluster) return Status::unsupported(std::string(tensor) + ": too many rows for one launch");
  return Status::ok();
}

// Kernels need an opt-in for more than 48 KB of shared memory, their static shared memory (the
// reduction slots, under kStaticSmemAllowance) counted: a two-row ring of exactly 48 KB beside
// them did not launch.
constexpr std::size_t kStaticSmemAllowance = 4 * 1024;
template <class Kernel> Status allow_smem(Kernel kernel, std::size_t bytes, const char* name) {
  if (bytes + kStaticSmemAllowance <= 48 * 1024 ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) == cudaSuccess)
    return Status::ok();
  return launch_status(name);
}

// One launch of a block-family kernel: `grid` CTAs in clusters of c.cluster; overlap_previous:
// with overlap_previous_attribute.
template <class... KernelArgs, class... Args>
Status launch_blocks_overlapping(bool overlap_previous, void (*kernel)(KernelArgs...), int64_t grid,
                                 const RowKernelConfig& c, cudaStream_t stream, const char* name, Args... args) {
  REDUCEKIT_RETURN_IF_ERROR(allow_smem(kernel, c.smem_bytes, name));
  if (c.cluster == 1 && !overlap_previous) {
    // A plain launch: cluster launches schedule CTAs more slowly, which short rows feel.
    kernel<<<static_cast<unsigned>(grid), c.threads, c.smem_bytes, stream>>>(args...);
    return launch_status(name);
  }
  cudaLaunchAttribute attributes[2] = {};
  int count = 0;
  if (c.cluster > 1) {
    if (c.cluster > kPortableClusterSize &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
      return launch_status(name);
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(c.cluster);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (overlap_previous) attributes[count++] = overlap_previous_attribute();
  return launch_with_attributes(kernel, grid, c.threads, c.smem_bytes, stream, attributes, count, name, args...);
}

template <class... KernelArgs, class... Args>
Status launch_blocks(void (*kernel)(KernelArgs...), int64_t grid, const RowKernelConfig& c, cudaStream_t stream,
                     const char* name, Args... args) {
  return launch_blocks_overlapping(false, kernel, grid, c, stream, name, args...);
}

// The tiles built for an op of family F: the family's (row_tiles), or every one for sweeps.
#ifdef REDUCEKIT_ALL_ROW_TILES
template <RowFamily F, typename T, class Op> constexpr RowTiles kRowTiles{~0u, ~0u, ~0u, ~0u, ~0u};
#else
template <RowFamily F, typename T, class Op>
constexpr RowTiles kRowTiles = row_tiles(F, static_cast<int>(sizeof(T)), Op::kInputs);
#endif

template <RowFamily F, typename T, class Op, bool kAligned, class... Extra>
Status launch_row_op_aligned(RowArgsFor<T, Op> args, const RowKernelConfig& c, cudaStream_t stream,
                             const Extra&... extra) {
  args.two_phase = c.two_phase;
  args.l2_hints = c.l2_hints;
  args.read_back_second = c.read_back_second;
  args.loads_ahead = c.loads_ahead;
  constexpr int VEC = kVec<T>;
  constexpr RowTiles kTiles = kRowTiles<F, T, Op>;
  if (c.kind == RowKernelKind::kWarp) {
    const int64_t rows_per_block = kernels::kWarpKernelThreads / c.lanes;
    const int64_t grid = std::min((args.rows + rows_per_block - 1) / rows_per_block, kMaxRowGrid);
    auto kernel = pick_warp_kernel<T, Op, VEC, kAligned, kTiles.warp, Extra...>(c.lanes, c.vpt);
    if (kernel == nullptr) return no_row_kernel("warp kernel", c.vpt);
    kernel<<<static_cast<unsigned>(grid), kernels::kWarpKernelThreads, 0, stream>>>(args, extra..., c.lanes);
    return launch_status("row_warp_kernel");
  }
  if (c.kind == RowKernelKind::kStaged) {
    // Any alignment: kAligned changes nothing here. Only one-input two-phase ops of 16-bit and
    // float32 rows (the softmax forwards) are planned staged (staged_bands_for).
    if constexpr (sizeof(T) <= 4 && sizeof...(Extra) == 0 && Op::kInputs == 1 && kernels::IsTwoPhase<Op>::value) {
      REDUCEKIT_RETURN_IF_ERROR(check_staged_launch(c, args.rows, "x"));
      auto kernel = c.threads == kStagedSmallThreads ? kernels::row_staged_kernel<T, Op, kStagedSmallThreads>
                                                      : kernels::row_staged_kernel<T, Op, kStagedThreads>;
      return launch_blocks(kernel, args.rows * c.cluster, c, stream, "row_staged_kernel", args);
    } else {
      return Status::unsupported("row plan: staged rows are planned for 16-bit and float32 softmax forwards only");
    }
  }
  constexpr int kAccWords = sizeof(kernels::acc_t<T>) / sizeof(float);
  constexpr int kMaxVpt = kRowTileWords / (VEC * kAccWords * Op::kInputs);
  static_assert(kMaxVpt >= 1 && kMaxVpt <= 16, "pick_tile instantiates tiles of 1 .. 16 vectors");
  if (c.kind == RowKernelKind::kWide) {  // one CTA a row: the grid holds every row
    constexpr int kWideMaxVpt = kWideTileValues / (VEC * (kernels::HoldsInputSum<Op>::value ? 1 : Op::kInputs));
    if (args.rows > kMaxRowGrid) return Status::unsupported("x: too many rows for one launch");
    if (c.threads > kWideRowThreads || c.cluster != 1)
      return Status::unsupported("row plan: wide rows are one CTA of at most " + std::to_string(kWideRowThreads) +
                                 " threads");
    // Rows of whole vectors; x's rows may lie off their granules where nothing else does (one
    // input). The same bits as the unpacked kernel below.
    constexpr bool kShiftedIn = !kAligned && !kernels::HoldsInputSum<Op>::value;
    if constexpr ((kAligned || kShiftedIn) && packed_wide_rows<T, Op, Extra...>()) {
      // Shifted x on the one-statistic kernels' 32-register form spilled 72-88 bytes (ptxas):
      // those rows keep the unpacked kernel, as CTAs of a partial warp (the shifted loads take
      // the neighbour granule from the next lane of a whole warp).
      const bool shifted_fits =
          (kernels::IsTwoPhase<Op>::value || c.wide_form != WideForm::kBase) && c.threads % 32 == 0;
      if (args.cols % VEC == 0 && (kAligned || (args.input_alone_shifted && shifted_fits))) {
        auto pick = [&](auto form) {
          return pick_tile<WidePackedKernels<T, Op, VEC, decltype(form)::value, kShiftedIn, Extra...>, kTiles.wide,
                           kWideMaxVpt>(c.vpt);
        };
        using Base = std::integral_constant<WideForm, WideForm::kBase>;
        RowKernel<T, Op, Extra...> packed = nullptr;
        if constexpr (kernels::IsTwoPhase<Op>::value) {
          using Lean = std::integral_constant<WideForm, WideForm::kLean>;
          if constexpr (sizeof(T) == 2) packed = c.wide_form == WideForm::kLean ? pick(Lean{}) : pick(Base{});
          else if (c.wide_form != WideForm::kLean) packed = pick(Base{});  // float32: no lean form planned
        } else {
          using Mid = std::integral_constant<WideForm, WideForm::kMid>;
          using Roomy = std::integral_constant<WideForm, WideForm::kRoomy>;
          if (c.wide_form == WideForm::kMid && c.threads > kWideMidRowThreads)
            return Status::unsupported("row plan: middle-form wide rows are CTAs of at most " +
                                       std::to_string(kWideMidRowThreads) + " threads");
          if constexpr (sizeof(T) == 4) {  // float32 (sums held): 32 floats a thread fit the roomy form only
            if (c.wide_form == WideForm::kRoomy) packed = pick(Roomy{});
          } else {
            if constexpr (kShiftedIn) packed = c.wide_form == WideForm::kMid ? pick(Mid{}) : pick(Roomy{});
            else packed = c.wide_form == WideForm::kMid     ? pick(Mid{})
                          : c.wide_form == WideForm::kRoomy ? pick(Roomy{})
                                                            : pick(Base{});
          }
        }
        if (packed == nullptr) return no_row_kernel("wide row kernel", c.vpt);
        return launch_blocks(packed, args.rows, c, stream, "row_wide_packed_kernel", args, extra...);
      }
    }
    auto kernel = pick_tile<WideKernels<T, Op, VEC, kAligned, Extra...>, kTiles.wide, kWideMaxVpt>(c.vpt);
    if (kernel == nullptr) return no_row_kernel("wide row kernel", c.vpt);
    return launch_blocks(kernel, args.rows, c, stream, "row_wide_kernel", args, extra...);
  }
  if constexpr (sizeof(T) < 4) {  // the planner rings 16-bit rows only
    if (c.ring > 0) {
      if (c.cluster > 1) return Status::unsupported("row plan: ring rows are one-CTA rows");
      // As many CTAs as stay resident; each loops over its rows. Shifted rows load directly
      // (row_ring_body): no ring memory.
      RowKernelConfig rc = c;
      if (!kAligned) rc.smem_bytes = 0;
      auto kernel = pick_tile<RingKernels<T, Op, VEC, kAligned, Extra...>, kTiles.ring, kMaxVpt>(rc.vpt);
      if (kernel == nullptr) return no_row_kernel("ring kernel", rc.vpt);
      REDUCEKIT_RETURN_IF_ERROR(allow_smem(kernel, rc.smem_bytes, "row_ring_kernel"));
      int resident = 0;
      REDUCEKIT_RETURN_IF_ERROR(
          resident_ctas(reinterpret_cast<const void*>(kernel), rc.threads, rc.smem_bytes, &resident));
      const int64_t grid = std::min(args.rows, std::max<int64_t>(1, resident / rc.cluster)) * rc.cluster;
      return launch_blocks(kernel, grid, rc, stream, "row_ring_kernel", args, extra...);
    }
  }
  const int64_t grid = std::min(args.rows, kMaxRowGrid / c.cluster) * c.cluster;
  if (c.tiles > 1) {  // streamed tiles: the largest size, or the re-read rows' small one
    constexpr int kRereadVpt = reread_vpt(kRereadTileWords, VEC, kAccWords, Op::kInputs);
    constexpr int kRereadSmallVpt = reread_vpt(kRereadSmallTileWords, VEC, kAccWords, Op::kInputs);
    static_assert(kRereadVpt < kMaxVpt, "re-read tiles are the smaller streamed size");
    if (c.cluster == 1 && (c.vpt == kRereadVpt || c.vpt == kRereadSmallVpt)) {
      if (c.stash_tiles > kMaxBulkStashTiles) return Status::unsupported("row plan: too many re-read tiles parked");
      if (c.vpt == kRereadVpt) {
        auto kernel = stream_kernel<T, Op, VEC, kRereadVpt, kAligned, true, Extra...>();
        return launch_blocks(kernel, grid, c, stream, "row_stream_kernel", args, extra..., c.tiles, c.stash_tiles);
      }
      if constexpr (kRereadSmallVpt < kRereadVpt) {
        auto kernel = stream_kernel<T, Op, VEC, kRereadSmallVpt, kAligned, true, Extra...>();
        return launch_blocks(kernel, grid, c, stream, "row_stream_kernel", args, extra..., c.tiles, c.stash_tiles);
      }
    }
    if (c.vpt != kMaxVpt)
      return Status::unsupported("row plan: streamed tiles must be of the largest size or a re-read size");
    auto kernel = stream_kernel<T, Op, VEC, kMaxVpt, kAligned, false, Extra...>();
    return launch_blocks(kernel, grid, c, stream, "row_stream_kernel", args, extra..., c.tiles, c.stash_tiles);
  }
  // Block kernels take one row a CTA (cluster) and no more: the grid must hold every row.
  // (Unreachable in practice: 2^31 rows of a block kernel's length would be terabytes.)
  if (args.rows > kMaxRowGrid / c.cluster) return Status::unsupported("x: too many rows for one launch");
  auto kernel = c.cluster > 1
                    ? pick_tile<BlockKernels<T, Op, VEC, kAligned, true, Extra...>, kTiles.cluster, kMaxVpt>(c.vpt)
                    : pick_tile<BlockKernels<T, Op, VEC, kAligned, false, Extra...>, kTiles.block, kMaxVpt>(c.vpt);
  if (kernel == nullptr) return no_row_kernel(c.cluster > 1 ? "cluster block kernel" : "block kernel", c.vpt);
  constexpr int kCappedVpt = 32 / VEC;  // float32 rows off their granules: row_block_kernel(_ext)_capped
  if constexpr (!kAligned && sizeof(T) == 4 && Op::kInputs == 1 && has_row_vpt(kTiles.block, kCappedVpt)) {
    if (c.cluster == 1 && c.vpt == kCappedVpt) {
      constexpr bool kExt = sizeof...(Extra) > 0;
      decltype(kernel) capped;
      if constexpr (kExt) capped = kernels::row_block_kernel_ext_capped<T, Op, VEC, kCappedVpt>;
      else capped = kernels::row_block_kernel_capped<T, Op, VEC, kCappedVpt>;
      int free_resident = 0, capped_resident = 0;
      REDUCEKIT_RETURN_IF_ERROR(
          resident_ctas(reinterpret_cast<const void*>(kernel), c.threads, c.smem_bytes, &free_resident));
      REDUCEKIT_RETURN_IF_ERROR(
          resident_ctas(reinterpret_cast<const void*>(capped), c.threads, c.smem_bytes, &capped_resident));
      // At equal residency the free _ext kernel has more registers than the cap, the bounded
      // plain one fewer (64): the kernel with more registers wins there.
      if (capped_resident > free_resident || (!kExt && capped_resident == free_resident)) kernel = capped;
    }
  }
  return launch_blocks(kernel, grid, c, stream, "row_block_kernel", args, extra...);
}

}  // namespace detail

// Launches Op over args.rows rows of args.cols elements with the configuration plan_row_kernel
// gave for cols under family F's policy (F picks the tiles built, row_tiles). `aligned` says
// whether every row start of every array is 16-byte aligned; it changes how elements move, never
// which thread combines them.
template <RowFamily F, typename T, class Op>
Status launch_row_op(const RowArgsFor<T, Op>& args, const RowKernelConfig& c, bool aligned, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) return Status::ok();
  if (aligned) return detail::launch_row_op_aligned<F, T, Op, true>(args, c, stream);
  return detail::launch_row_op_aligned<F, T, Op, false>(args, c, stream);
}

// The same for an op of the extended interface (Op::Extra, see row_engine.cuh), whose kernels
// take `extra` as a second argument. `aligned` covers the arrays the Extra points at as well.
template <RowFamily F, typename T, class Op>
Status launch_row_op(const RowArgsFor<T, Op>& args, const typename Op::Extra& extra, const RowKernelConfig& c,
                     bool aligned, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) return Status::ok();
  if (aligned) return detail::launch_row_op_aligned<F, T, Op, true>(args, c, stream, extra);
  return detail::launch_row_op_aligned<F, T, Op, false>(args, c, stream, extra);
}

}  // namespace reducekit
