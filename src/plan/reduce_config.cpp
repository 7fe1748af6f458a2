// SPDX-License-Identifier: Apache-2.0
// Host planning of a reduction launch (see reduce_config.hpp).
#include "plan/reduce_config.hpp"

#include <algorithm>
#include <limits>

#include "plan/checked_mul.hpp"
#include "reducekit/tuning.hpp"

namespace reducekit {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Every run the kernels read (a row; a column slab's row of N) starts on a 16-byte boundary.
bool runs_aligned(const ReductionPlan& p, int vec) {
  if (!p.base_aligned) return false;
  if (p.outer > 1 && p.outer_stride % vec != 0) return false;
  return p.kind != ReductionKind::kColumn || p.reduced_stride % vec == 0;
}

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

void plan_row(const ReductionPlan& p, const ReduceKnobs& knobs, ReduceConfig* c) {
  const int64_t vectors = ceil_div(p.reduced, c->vec);
  if (vectors <= knobs.row_warp_max_vectors) {
    // Enough lanes that each loads at most a few unrolled steps; short rows share a warp.
    c->kernel = ReduceKernel::kRowWarp;
    c->lanes = std::min(32, pow2_at_least(ceil_div(vectors, kReduceUnroll)));
    c->grid = ceil_div(p.outer, kReduceThreads / c->lanes);
    return;
  }
  c->kernel = ReduceKernel::kRowBlock;
  c->chunk = kRowChunk;
  c->chunks = ceil_div(p.reduced, kRowChunk);
  c->grid = p.outer * c->chunks;
  if (c->chunks > 1) {
    c->tickets = p.outer;
    c->partials = p.outer * c->chunks;
  }
}

void plan_column(const ReductionPlan& p, const ReduceKnobs& knobs, ReduceConfig* c) {
  c->kernel = ReduceKernel::kColumn;
  // The warp's layout, from K only (the arithmetic): short columns are one lane's each.
  c->column_row_lanes = p.reduced < kColumnShortBelowRows ? 1 : kColumnRowLanes;
  const int64_t rows_per_step = int64_t(c->column_row_lanes) * kColumnUnroll;
  // Segments of whole steps, at most knobs.max_segments (kColumnMaxSegments) of them: long enough that their partials
  // stay a few percent of the input and the per-segment butterfly (3 merges and a broadcast per
  // column) is paid per 4 steps a lane at most, short enough to spread small problems over many
  // CTAs. From K only (the arithmetic). Short columns are one segment (K < the shortest).
  const int64_t min_rows = round_up(std::max<int64_t>(knobs.min_segment_rows, 1), rows_per_step);
  const int64_t max_segments = std::max<int64_t>(knobs.max_segments, 1);
  c->chunk = std::max(min_rows, round_up(ceil_div(p.reduced, max_segments), rows_per_step));
  c->chunks = ceil_div(p.reduced, c->chunk);
  const int64_t columns_per_cta = int64_t(kReduceThreads / c->column_row_lanes) * c->vec;
  c->tiles = ceil_div(p.inner, columns_per_cta);
  // How the work is spread (never the arithmetic): few columns, one CTA per segment; too few
  // tiles to fill the GPU, one CTA per group of segments; else one CTA per tile.
  const int64_t column_vectors = p.outer * ceil_div(p.inner, c->vec);
  const int64_t slices = p.outer * c->tiles;
  if (c->chunks > 1 && column_vectors < knobs.split_below_vectors) {
    c->parts = c->chunks;
  } else if (c->chunks > 1 && slices < knobs.groups_below_ctas) {
    c->parts = std::min<int64_t>(c->column_row_lanes, c->chunks);  // one per group (G = lanes down K)
  } else {
    c->parts = 1;
  }
  c->grid = slices * c->parts;
  // float32 rows, aligned, even when forced: 16-bit rows and shifted ones ran slower (LOG.md), so
  // no kernel is built for them.
  const int64_t wide_from =
      knobs.wide_from_columns == kColumnWideShipped ? kColumnWideFromColumns : knobs.wide_from_columns;
  c->column_wide = c->aligned && c->vec == 4 && c->column_row_lanes == kColumnRowLanes && wide_from > 0 &&
                   p.inner >= wide_from;
  if (c->split()) {
    c->tickets = slices;
    c->partials = c->parts * p.outer * p.inner;
  }
}

void plan_all(const ReductionPlan& p, ReduceConfig* c) {
  c->kernel = ReduceKernel::kAll;
  c->chunk = int64_t(kReduceThreads) * kReduceUnroll * c->vec;
  c->chunks = std::min(ceil_div(p.reduced, c->chunk), kAllMaxCtas);
  c->grid = c->chunks;
  if (c->chunks > 1) {
    c->tickets = 1;
    c->partials = c->chunks;
  }
}

}  // namespace

const char* reduce_kernel_name(ReduceKernel k) {
  switch (k) {
    case ReduceKernel::kNothing: return "nothing";
    case ReduceKernel::kFill: return "fill";
    case ReduceKernel::kRowWarp: return "row_warp";
    case ReduceKernel::kRowBlock: return "row_block";
    case ReduceKernel::kColumn: return "column";
    case ReduceKernel::kAll: return "all";
  }
  return "unknown";
}

ReduceKnobs reduce_knobs() {
  ReduceKnobs k;
  if (const auto v = tuning("row_warp_max_vectors")) k.row_warp_max_vectors = *v;
  if (const auto v = tuning("col_min_segment_rows")) k.min_segment_rows = *v;
  if (const auto v = tuning("col_max_segments")) k.max_segments = *v;
  if (const auto v = tuning("col_split_below_vectors")) k.split_below_vectors = *v;
  if (const auto v = tuning("col_groups_below_ctas")) k.groups_below_ctas = *v;
  if (const auto v = tuning("col_wide_from_columns")) k.wide_from_columns = *v;
  return k;
}

ReduceConfig plan_reduce_kernel(const ReductionPlan& plan, int elem_bytes, const ReduceKnobs& knobs) {
  ReduceConfig c;
  c.vec = 16 / elem_bytes;
  c.aligned = runs_aligned(plan, c.vec);
  if (plan.out_numel == 0 || plan.outer == 0) return c;  // kNothing
  if (plan.reduced == 0) {
    c.kernel = ReduceKernel::kFill;
    c.grid = ceil_div(plan.out_numel, kReduceThreads);
  } else if (plan.kind == ReductionKind::kRow) {
    plan_row(plan, knobs, &c);
  } else if (plan.kind == ReductionKind::kColumn) {
    plan_column(plan, knobs, &c);
  } else {
    plan_all(plan, &c);
  }
  c.grid = std::min(c.grid, kMaxGrid);
  if (c.tickets > 0) c.zeroed_bytes = static_cast<std::size_t>(round_up(c.tickets * 4, kWorkspaceAlign));
  // Only the col_* overrides reach past 2^59 partial slots; such a size saturates, so the
  // caller's allocation fails rather than a small workspace being taken for it.
  int64_t partial_bytes = 0;
  const bool fits = checked_mul(c.partials, int64_t(kPartialSlotBytes), &partial_bytes) &&
                    static_cast<std::size_t>(partial_bytes) <= std::numeric_limits<std::size_t>::max() - c.zeroed_bytes;
  c.workspace_bytes = fits ? c.zeroed_bytes + static_cast<std::size_t>(partial_bytes)
                           : std::numeric_limits<std::size_t>::max();
  return c;
}

}  // namespace reducekit
