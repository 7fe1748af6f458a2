// SPDX-License-Identifier: Apache-2.0
// What a reduction kernel is given, and the fixed shapes it is compiled for: the canonical problem (plan/reduction_plan.hpp), where its
// outputs go, and its workspace. Plain structs, shared by host launch code and device code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reducekit/tensor.hpp"

namespace reducekit::kernels {

namespace shape {
// Shapes the kernels are compiled for; plan/reduce_config.cpp plans launches with the same values.
constexpr int kReduceThreads = 256;      // every reduction CTA
constexpr int kReduceUnroll = 4;         // row/all paths: 16-byte vectors in flight per thread
constexpr int kRowWarpMaxVectors = 512;  // rows up to this many vectors: a warp or less per row
constexpr int64_t kRowChunk = 32768;     // longer rows are cut into chunks of this many elements
constexpr int kColumnRowLanes = 8;       // column path: lanes down the reduced extent per warp
                                         // (32 / 8 = 4 across the inner extent)
constexpr int kColumnUnroll = 8;         // ... rows each lane loads per step
// Short columns, K below one step of that layout (8 x 8 rows): most of its ky lanes would sit
// idle (16 x 2^20 sum float32 ran at half torch's speed, LOG.md), so a warp is 32 lanes
// across x 1 down instead, each lane folding its whole column.
constexpr int64_t kColumnShortBelowRows = int64_t(kColumnRowLanes) * kColumnUnroll;
constexpr int64_t kColumnMaxSegments = 64;
constexpr int64_t kColumnMinSegmentRows = 256;  // 4 steps a lane: the segment's butterfly is paid per 32 rows at most
constexpr int kColumnGroups = kColumnRowLanes;   // segments s = g, g + 8, ... fold into group g (lane ky = g)
constexpr int64_t kColumnSplitBelowVectors = 4096;  // fewer column vectors: one CTA per segment
constexpr int64_t kColumnGroupsBelowCtas = 512;     // fewer CTAs with one per tile: one per (tile, group)
static_assert(kColumnMinSegmentRows >= kColumnShortBelowRows, "short columns are one segment");
constexpr int64_t kAllMaxCtas = 512;  // all path: fits one wave at 4 CTAs per SM on 132 SMs
constexpr int64_t kMaxGrid = int64_t(1) << 30;  // kernels loop over work items beyond this
// Workspace: one slot per partial statistic (the largest is float64 Welford, 24 bytes), and
// completion tickets (uint32) in a zeroed prefix rounded to this many bytes.
constexpr std::size_t kPartialSlotBytes = 32;
constexpr std::size_t kWorkspaceAlign = 256;

}  // namespace shape
using namespace shape;

// Which finished value a policy writes (the policies that serve several ops read it).
enum class ReduceMode : int8_t { kSum, kMean, kVar, kStd, kVarMean, kStdMean, kOther };

struct ReduceOutputs {
  void* out = nullptr;       // dense, one element per output
  void* mean_out = nullptr;  // var_mean / std_mean only
  DType out_type = DType::kFloat32;
  DType mean_type = DType::kFloat32;
  ReduceMode mode = ReduceMode::kOther;
  double correction = 0.0;  // moments only
};

struct ReduceArgs {
  const void* x = nullptr;
  // The canonical problem; element offsets (see reduction_plan.hpp).
  int64_t outer = 0;
  int64_t reduced = 0;
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t reduced_stride = 1;
  bool aligned = false;  // 16-byte vector loads are safe; changes how bytes move, never a result
  ReduceOutputs outs;
  // From ReduceConfig (plan/reduce_config.hpp).
  int64_t chunk = 0;
  int64_t chunks = 1;
  int64_t tiles = 0;
  int64_t parts = 1;      // column path: CTAs per (outer index, tile), 1, min(8, segments) or segments
  unsigned* tickets = nullptr;  // zero on entry, zero again on exit
  void* partials = nullptr;
};

}  // namespace reducekit::kernels
