// SPDX-License-Identifier: Apache-2.0
// Host planning of a reduction launch: which kernel runs a canonical problem, how its reduced
// extent is cut, and how much workspace that takes. Plain C++ (no CUDA) so CI tests it.
//
// Batch invariance: everything that changes the arithmetic of one output (vector width, lanes per
// row, chunk and segment lengths) is a function of the reduced extent and the element size only.
// The number of outputs may only change how work is spread over CTAs (column path: `split`),
// never the order in which an output's values are combined.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plan/reduction_plan.hpp"

namespace reducekit {

// The shapes the reduction kernels (reduce_engine.cuh) are compiled for, and the plans' limits.
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
// The wide column layout (ReduceConfig::column_wide): a thread plays this many of the
// kColumnRowLanes lanes down K, so a warp is 8 threads across x 4 down, the same arithmetic.
constexpr int kColumnWideLanesPerThread = 2;
constexpr int64_t kColumnWideShipped = -1;
constexpr int64_t kColumnWideFromColumns = 4096;
constexpr int64_t kColumnMaxSegments = 64;
constexpr int64_t kColumnMinSegmentRows = 256;  // 4 steps a lane: the segment's butterfly is paid per 32 rows at most
constexpr int kColumnGroups = kColumnRowLanes;   // segments s = g, g + 8, ... fold into group g (lane ky = g)
constexpr int64_t kColumnSplitBelowVectors = 4096;  // fewer column vectors: one CTA per segment
// Fewer CTAs with one per tile: one per (tile, group). From about a full wave of tiles up, one
// CTA per tile walking all of K ran faster; at 128 tiles neither won throughout.
constexpr int64_t kColumnGroupsBelowCtas = 144;
static_assert(kColumnMinSegmentRows >= kColumnShortBelowRows, "short columns are one segment");
constexpr int64_t kAllMaxCtas = 512;  // all path: fits one wave at 4 CTAs per SM on 132 SMs
constexpr int64_t kMaxGrid = int64_t(1) << 30;  // kernels loop over work items beyond this
// Workspace: one slot per partial statistic (the largest is float64 Welford, 24 bytes), and
// completion tickets (uint32) in a zeroed prefix rounded to this many bytes.
constexpr std::size_t kPartialSlotBytes = 32;
constexpr std::size_t kWorkspaceAlign = 256;

enum class ReduceKernel : int8_t {
  kNothing,   // no outputs
  kFill,      // empty reduced sets: every output is the op's value for an empty set
  kRowWarp,   // row path, `lanes` (1..32) threads per row
  kRowBlock,  // row path, one CTA per (row, chunk); chunks > 1 combine through the workspace
  kColumn,    // column path, see reduce_engine.cuh
  kAll,       // every element, one CTA per chunk group, last CTA combines
};

const char* reduce_kernel_name(ReduceKernel k);

struct ReduceConfig {
  ReduceKernel kernel = ReduceKernel::kNothing;
  int vec = 1;              // elements per 16-byte vector
  int lanes = 0;            // kRowWarp: threads per row
  int64_t chunk = 0;        // kRowBlock: elements per chunk; kColumn: rows per segment;
                            // kAll: elements per CTA step
  int64_t chunks = 1;       // number of chunks (kRowBlock), segments (kColumn) or CTAs (kAll)
  int64_t parts = 1;        // kColumn: CTAs per (outer index, tile): 1 (whole), min(8, segments)
                            // (one per group) or segments (one per segment); CTA p folds segments
                            // p, p + parts, ... (see reduce_engine.cuh)
  int64_t tiles = 0;        // kColumn: CTAs across one outer slice of the inner extent
  int column_row_lanes = 0; // kColumn: lanes down K per warp (32 / this across): kColumnRowLanes,
                            // or 1 for short columns (K < kColumnShortBelowRows)
  bool aligned = false;     // every run of x starts on a 16-byte boundary: whole-vector loads only
                            // (else each run loads as its own alignment allows; the same bits)
  bool column_wide = false; // kColumn: the launcher runs the wide layout where the statistic fits it
                            // (kColumnWideLanesPerThread lanes a thread, ceil(tiles / 2) tiles; the same bits)
  int64_t grid = 0;         // CTAs to launch
  int64_t tickets = 0;      // completion counters in the workspace
  int64_t partials = 0;     // partial statistics in the workspace
  std::size_t workspace_bytes = 0;
  std::size_t zeroed_bytes = 0;  // tickets' prefix

  bool split() const { return parts > 1; }  // kColumn: partials through the workspace
};

// Reduction planner knobs. The defaults ship; a sweep overrides them by name (reducekit/tuning.hpp).
// The row path's: rows of at most row_warp_max_vectors vectors take the warp kernel (a function
// of the row length, like the rest of a row's arithmetic, which it changes). The column path's
// (col_*): min_segment_rows and max_segments change the arithmetic (segment length is part of
// it; still a function of K only, so deterministic and batch-invariant within one setting); the
// others only spread work.
struct ReduceKnobs {
  int64_t row_warp_max_vectors = kRowWarpMaxVectors;       // row_warp_max_vectors
  int64_t min_segment_rows = kColumnMinSegmentRows;        // col_min_segment_rows (x 64)
  int64_t max_segments = kColumnMaxSegments;               // col_max_segments
  int64_t split_below_vectors = kColumnSplitBelowVectors;  // col_split_below_vectors
  int64_t groups_below_ctas = kColumnGroupsBelowCtas;      // col_groups_below_ctas
  // Inner extents of at least this many columns run the wide layout, any dtype and alignment (0:
  // never). kColumnWideShipped: the shipped rule, float32 rows on 16-byte boundaries from
  // kColumnWideFromColumns columns (it changes no bits, so it may go by all three), where it
  // gained; 16-bit, shifted rows and 1024 columns or fewer lost on it.
  int64_t wide_from_columns = kColumnWideShipped;          // col_wide_from_columns
};
// The shipped knobs with the overrides set now.
ReduceKnobs reduce_knobs();

// The launch for `plan` over elements of `elem_bytes` bytes (4, 2 or 8).
ReduceConfig plan_reduce_kernel(const ReductionPlan& plan, int elem_bytes, const ReduceKnobs& knobs = ReduceKnobs{});

}  // namespace reducekit
