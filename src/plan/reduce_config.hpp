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

#include "kernels/reduce_args.hpp"  // the kernels' shape constants
#include "plan/reduction_plan.hpp"

namespace reducekit {

using namespace kernels::shape;

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
  int64_t grid = 0;         // CTAs to launch
  int64_t tickets = 0;      // completion counters in the workspace
  int64_t partials = 0;     // partial statistics in the workspace
  std::size_t workspace_bytes = 0;
  std::size_t zeroed_bytes = 0;  // tickets' prefix

  bool split() const { return parts > 1; }  // kColumn: partials through the workspace
};

// Column-path planner knobs. The defaults ship; a sweep overrides them by name (col_*,
// reducekit/tuning.hpp). min_segment_rows and max_segments change the arithmetic (segment length is
// part of it; still a function of K only, so deterministic and batch-invariant within one
// setting); the other two only spread work.
struct ColumnKnobs {
  int64_t min_segment_rows = kColumnMinSegmentRows;        // col_min_segment_rows (x 64)
  int64_t max_segments = kColumnMaxSegments;               // col_max_segments
  int64_t split_below_vectors = kColumnSplitBelowVectors;  // col_split_below_vectors
  int64_t groups_below_ctas = kColumnGroupsBelowCtas;      // col_groups_below_ctas
};
// The shipped knobs with the overrides set now.
ColumnKnobs column_knobs();

// The launch for `plan` over elements of `elem_bytes` bytes (4, 2 or 8).
ReduceConfig plan_reduce_kernel(const ReductionPlan& plan, int elem_bytes, const ColumnKnobs& knobs = ColumnKnobs{});

}  // namespace reducekit
