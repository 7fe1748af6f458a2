// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_reduce_kernel: the strategy per extent, the workspace it asks for, and the
// batch-invariance rule (an output's arithmetic depends on the reduced extent and dtype only).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <random>

#include "plan/reduce_config.hpp"

namespace reducekit {
namespace {

ReductionPlan row(int64_t outer, int64_t n) {
  ReductionPlan p;
  p.kind = ReductionKind::kRow;
  p.outer = outer;
  p.reduced = n;
  p.outer_stride = n;
  p.out_numel = outer;
  return p;
}

ReductionPlan column(int64_t outer, int64_t k, int64_t inner) {
  ReductionPlan p;
  p.kind = ReductionKind::kColumn;
  p.outer = outer;
  p.reduced = k;
  p.inner = inner;
  p.reduced_stride = inner;
  p.outer_stride = k * inner;
  p.out_numel = outer * inner;
  return p;
}

ReductionPlan all(int64_t n) {
  ReductionPlan p;
  p.kind = ReductionKind::kAll;
  p.reduced = n;
  p.outer_stride = n;
  return p;
}

TEST(ReduceConfig, ShortRowsShareAWarpAndLongerOnesGetMoreLanes) {
  // float32: 4 elements per vector, up to 4 vectors per lane
  EXPECT_EQ(plan_reduce_kernel(row(100, 1), 4).lanes, 1);
  EXPECT_EQ(plan_reduce_kernel(row(100, 64), 4).lanes, 4);
  EXPECT_EQ(plan_reduce_kernel(row(100, 65), 4).lanes, 8);  // 17 vectors
  EXPECT_EQ(plan_reduce_kernel(row(100, 512), 4).lanes, 32);
  const ReduceConfig c = plan_reduce_kernel(row(65536, 64), 4);
  EXPECT_EQ(c.kernel, ReduceKernel::kRowWarp);
  EXPECT_EQ(c.grid, 65536 / (kReduceThreads / 4));
  EXPECT_EQ(c.workspace_bytes, 0u);
  EXPECT_EQ(plan_reduce_kernel(row(10, 2048), 4).kernel, ReduceKernel::kRowWarp);
  EXPECT_EQ(plan_reduce_kernel(row(10, 2049), 4).kernel, ReduceKernel::kRowBlock);
  EXPECT_EQ(plan_reduce_kernel(row(10, 4096), 2).kernel, ReduceKernel::kRowWarp);  // bf16: 512 vectors
}

// Past 2^59 partial slots (only the col_* overrides split a column that finely) the workspace size
// saturates rather than wrapping to a small one.
TEST(ReduceConfig, WorkspacePastSizeTSaturates) {
  ReduceKnobs fine;
  fine.min_segment_rows = 1;
  fine.split_below_vectors = std::numeric_limits<int64_t>::max();
  const ReduceConfig c = plan_reduce_kernel(column(1, 63, int64_t(1) << 56), 2, fine);
  ASSERT_EQ(c.kernel, ReduceKernel::kColumn);
  ASSERT_EQ(c.parts, 8) << "one CTA a segment of 8 rows";
  EXPECT_GT(__int128(c.partials) * kPartialSlotBytes, __int128(std::numeric_limits<std::size_t>::max()));
  EXPECT_EQ(c.workspace_bytes, std::numeric_limits<std::size_t>::max());
  const ReduceConfig fits = plan_reduce_kernel(column(1, 63, int64_t(1) << 50), 2, fine);
  EXPECT_EQ(fits.workspace_bytes, fits.zeroed_bytes + std::size_t(fits.partials) * kPartialSlotBytes);
}

// row_warp_max_vectors moves rows between the warp kernel (up to 32 lanes a row, however long)
// and the block kernel, by the row length alone.
TEST(ReduceConfig, RowWarpKnobPicksTheRowKernel) {
  EXPECT_EQ(plan_reduce_kernel(row(4096, 4096), 4).kernel, ReduceKernel::kRowBlock) << "1024 vectors";
  ReduceKnobs knobs;
  knobs.row_warp_max_vectors = 1024;
  const ReduceConfig warp = plan_reduce_kernel(row(4096, 4096), 4, knobs);
  EXPECT_EQ(warp.kernel, ReduceKernel::kRowWarp);
  EXPECT_EQ(warp.lanes, 32);
  EXPECT_EQ(warp.grid, 4096 / (kReduceThreads / 32));
  EXPECT_EQ(warp.workspace_bytes, 0u);
  EXPECT_EQ(plan_reduce_kernel(row(4096, 4100), 4, knobs).kernel, ReduceKernel::kRowBlock) << "1025 vectors";
  knobs.row_warp_max_vectors = int64_t(1) << 20;
  EXPECT_EQ(plan_reduce_kernel(row(3, 100003), 4, knobs).kernel, ReduceKernel::kRowWarp) << "no chunks";
  knobs.row_warp_max_vectors = 0;
  const ReduceConfig block = plan_reduce_kernel(row(10, 16), 4, knobs);
  EXPECT_EQ(block.kernel, ReduceKernel::kRowBlock) << "every row on the block kernel";
  EXPECT_EQ(block.chunks, 1);
}

TEST(ReduceConfig, LongRowsAreCutIntoChunksThroughTheWorkspace) {
  const ReduceConfig one = plan_reduce_kernel(row(4096, kRowChunk), 4);
  EXPECT_EQ(one.kernel, ReduceKernel::kRowBlock);
  EXPECT_EQ(one.chunks, 1);
  EXPECT_EQ(one.workspace_bytes, 0u);
  const ReduceConfig c = plan_reduce_kernel(row(16, 1 << 20), 4);
  EXPECT_EQ(c.chunks, (1 << 20) / kRowChunk);
  EXPECT_EQ(c.grid, 16 * c.chunks);
  EXPECT_EQ(c.tickets, 16);
  EXPECT_EQ(c.partials, 16 * c.chunks);
  EXPECT_EQ(c.zeroed_bytes, kWorkspaceAlign);
  EXPECT_EQ(c.workspace_bytes, kWorkspaceAlign + 16 * c.chunks * kPartialSlotBytes);
  EXPECT_EQ(plan_reduce_kernel(row(3, kRowChunk + 1), 4).chunks, 2);
}

TEST(ReduceConfig, ColumnSegmentsDependOnKOnly) {
  for (int64_t k : {1, 7, 64, 65, 4096, 32768, 1000003}) {
    const ReduceConfig a = plan_reduce_kernel(column(1, k, 128), 4);
    const ReduceConfig b = plan_reduce_kernel(column(7, k, 100000), 4);
    EXPECT_EQ(a.kernel, ReduceKernel::kColumn);
    EXPECT_EQ(a.chunk, b.chunk) << "k=" << k;
    EXPECT_EQ(a.chunks, b.chunks) << "k=" << k;
    EXPECT_EQ(a.column_row_lanes, b.column_row_lanes) << "k=" << k;
    EXPECT_LE(a.chunks, kColumnMaxSegments);
    EXPECT_EQ(a.chunk % (a.column_row_lanes * kColumnUnroll), 0);  // whole steps
    EXPECT_GE(a.chunk * a.chunks, k);
    EXPECT_LT(a.chunk * (a.chunks - 1), k);
  }
}

// The segment knobs (tuning only: they change the arithmetic): 64-row segments, up to 256 of them,
// give a 65536-row column 256 CTAs where the default gives 64.
TEST(ReduceConfig, ColumnSegmentKnobsBoundTheSegments) {
  ReduceKnobs knobs;
  EXPECT_EQ(plan_reduce_kernel(column(1, 65536, 64), 4, knobs).chunks, kColumnMaxSegments);
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 128), 4, knobs).chunks, 4096 / kColumnMinSegmentRows);
  knobs.min_segment_rows = 64;
  knobs.max_segments = 256;
  const ReduceConfig c = plan_reduce_kernel(column(1, 65536, 64), 4, knobs);
  EXPECT_EQ(c.chunk, 256);
  EXPECT_EQ(c.chunks, 256);
  EXPECT_EQ(c.grid, 256) << "one CTA a segment: few column vectors";
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 128), 4, knobs).chunks, 64);
  knobs.max_segments = 0;
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 128), 4, knobs).chunks, 1) << "at least one segment";
}

// The wide layout goes by the inner extent, dtype and alignment (it changes no bits), only where
// the arithmetic has kColumnRowLanes lanes down K. Shipped: float32 from kColumnWideFromColumns
// columns, aligned rows only; an explicit knob moves the threshold, still float32 aligned rows. GPU test
// WideColumnLayoutGivesTheSameBits runs these problems.
TEST(ReduceConfig, ColumnWideLayoutByTheInnerExtent) {
  ReduceKnobs knobs;
  const ReduceConfig shipped = plan_reduce_kernel(column(1, 2600, 20000), 4, knobs);
  EXPECT_TRUE(shipped.column_wide) << "float32, 20000 columns";
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20001), 4, knobs).column_wide) << "shifted rows: not shipped";
  ReductionPlan shifted_base = column(1, 2600, 20000);
  shifted_base.base_aligned = false;
  EXPECT_FALSE(plan_reduce_kernel(shifted_base, 4, knobs).column_wide) << "a shifted start: not shipped";
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20000), 2, knobs).column_wide) << "16-bit: not shipped";
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20000), 8, knobs).column_wide) << "float64: not shipped";
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, kColumnWideFromColumns - 1), 4, knobs).column_wide);
  EXPECT_TRUE(plan_reduce_kernel(column(1, 2600, kColumnWideFromColumns), 4, knobs).column_wide);
  knobs.wide_from_columns = 0;
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20000), 4, knobs).column_wide) << "0: never";
  knobs.wide_from_columns = 1;
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20000), 2, knobs).column_wide) << "forced: never 16-bit";
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20000), 8, knobs).column_wide) << "forced: never float64";
  EXPECT_FALSE(plan_reduce_kernel(shifted_base, 4, knobs).column_wide) << "forced: never on shifted rows";
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 20001), 4, knobs).column_wide) << "forced: never on shifted rows";
  // Every way of spreading the work: one CTA per tile, per (tile, group), per (tile, segment).
  const std::pair<ReductionPlan, int64_t> problems[] = {{column(128, 70, 512), 1}, {column(1, 2600, 16384), 8},
                                                        {column(1, 4096, 136), 16}, {column(1, 700, 4104), 3},
                                                        {column(37, 1000, 300), 4}};
  for (const auto& [p, parts] : problems) {
    const ReduceConfig c = plan_reduce_kernel(p, 4, knobs);
    EXPECT_TRUE(c.column_wide) << "k=" << p.reduced << " inner=" << p.inner;
    EXPECT_EQ(c.column_row_lanes, kColumnRowLanes);
    EXPECT_EQ(c.parts, parts) << "k=" << p.reduced << " inner=" << p.inner;
  }
  EXPECT_FALSE(plan_reduce_kernel(column(1, 40, 20000), 4, knobs).column_wide) << "short columns keep one lane";
  knobs.wide_from_columns = 4096;
  EXPECT_FALSE(plan_reduce_kernel(column(1, 2600, 4095), 4, knobs).column_wide);
  const ReduceConfig wide = plan_reduce_kernel(column(1, 2600, 4096), 4, knobs);
  ReduceKnobs off;
  off.wide_from_columns = 0;
  const ReduceConfig narrow = plan_reduce_kernel(column(1, 2600, 4096), 4, off);
  EXPECT_FALSE(narrow.column_wide);
  EXPECT_TRUE(wide.column_wide);
  EXPECT_EQ(wide.chunk, narrow.chunk) << "the same segments";
  EXPECT_EQ(wide.chunks, narrow.chunks);
  EXPECT_EQ(wide.parts, narrow.parts);
  EXPECT_EQ(wide.workspace_bytes, narrow.workspace_bytes) << "the launcher uses half the tiles' tickets";
}

// Whole-vector loads only where every run starts on a 16-byte boundary: the base pointer, the
// stride between rows (outer) and, for columns, between the rows of a slab (reduced).
TEST(ReduceConfig, AlignedWhereEveryRunStartsOnAVector) {
  EXPECT_TRUE(plan_reduce_kernel(row(64, 4096), 4).aligned);
  EXPECT_FALSE(plan_reduce_kernel(row(64, 4097), 4).aligned) << "rows shifted by one element";
  EXPECT_TRUE(plan_reduce_kernel(row(1, 4097), 4).aligned) << "one row: its start alone";
  EXPECT_TRUE(plan_reduce_kernel(row(64, 4100), 4).aligned) << "4 floats a vector";
  EXPECT_FALSE(plan_reduce_kernel(row(64, 4100), 2).aligned) << "8 halves a vector";
  EXPECT_TRUE(plan_reduce_kernel(column(3, 5, 64), 2).aligned);
  EXPECT_FALSE(plan_reduce_kernel(column(1, 5, 60), 2).aligned) << "the slab's rows shifted";
  EXPECT_TRUE(plan_reduce_kernel(all(1001), 4).aligned);
  ReductionPlan offset = row(64, 4096);
  offset.base_aligned = false;
  EXPECT_FALSE(plan_reduce_kernel(offset, 4).aligned) << "x starts inside a vector";
}

TEST(ReduceConfig, ShortColumnsTakeOneLaneEach) {
  // K below one step of the 8-lanes-down layout: 32 lanes across, one lane folds a whole column,
  // one segment, nothing split, whatever the number of columns.
  for (int64_t k : {int64_t(1), int64_t(2), int64_t(16), kColumnShortBelowRows - 1}) {
    for (int64_t inner : {2, 1000, 1 << 20}) {
      for (int elem : {2, 4, 8}) {
        const ReduceConfig c = plan_reduce_kernel(column(3, k, inner), elem);
        const int vec = 16 / elem;
        EXPECT_EQ(c.kernel, ReduceKernel::kColumn);
        EXPECT_EQ(c.column_row_lanes, 1) << "k=" << k;
        EXPECT_GE(c.chunk, k);
        EXPECT_EQ(c.chunks, 1);
        EXPECT_EQ(c.parts, 1);
        EXPECT_EQ(c.tiles, (inner + kReduceThreads * vec - 1) / (kReduceThreads * vec));
        EXPECT_EQ(c.grid, 3 * c.tiles);
        EXPECT_EQ(c.workspace_bytes, 0u);
      }
    }
  }
  const ReduceConfig step = plan_reduce_kernel(column(1, kColumnShortBelowRows, 1 << 20), 4);
  EXPECT_EQ(step.column_row_lanes, kColumnRowLanes);
  EXPECT_EQ(step.tiles, (1 << 20) / (kReduceThreads / kColumnRowLanes * 4));
}

TEST(ReduceConfig, FewColumnsSplitSegmentsOverCtas) {
  const ReduceConfig few = plan_reduce_kernel(column(1, 4096, 128), 4);
  EXPECT_TRUE(few.split());
  EXPECT_EQ(few.tiles, 1);
  EXPECT_EQ(few.parts, few.chunks);
  EXPECT_EQ(few.grid, few.chunks);
  EXPECT_EQ(few.tickets, 1);
  EXPECT_EQ(few.partials, few.chunks * 128);
  // Many columns in many tiles: one CTA per tile walks every segment.
  const ReduceConfig many = plan_reduce_kernel(column(4, 4096, 32768), 4);
  EXPECT_FALSE(many.split());
  EXPECT_EQ(many.parts, 1);
  EXPECT_EQ(many.tiles, 32768 / (kReduceThreads / kColumnRowLanes * 4));
  EXPECT_EQ(many.grid, 4 * many.tiles);
  EXPECT_EQ(many.workspace_bytes, 0u);
  EXPECT_FALSE(plan_reduce_kernel(column(1, 64, 33), 4).split()) << "one segment: nothing to split";
}

TEST(ReduceConfig, MidColumnsSplitGroupsOverCtas) {
  // 4096 x 16384 float32: 128 tiles cannot fill the GPU with one CTA each; one CTA per (tile,
  // group of segments) instead, 8 partials per column.
  const ReduceConfig mid = plan_reduce_kernel(column(1, 4096, 16384), 4);
  EXPECT_EQ(mid.tiles, 128);
  EXPECT_TRUE(mid.split());
  EXPECT_EQ(mid.parts, kColumnGroups);
  EXPECT_EQ(mid.grid, mid.tiles * kColumnGroups);
  EXPECT_EQ(mid.tickets, mid.tiles);
  EXPECT_EQ(mid.partials, kColumnGroups * 16384);
  // From kColumnGroupsBelowCtas tiles (float32 4096 x 32768: 256) one CTA per tile walks all of K.
  const ReduceConfig walk = plan_reduce_kernel(column(1, 4096, 32768), 4);
  EXPECT_EQ(walk.tiles, 256);
  EXPECT_EQ(walk.parts, 1);
  EXPECT_FALSE(walk.split());
  EXPECT_EQ(walk.chunk, mid.chunk) << "the same segments";
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 50264), 2).parts, 1) << "bf16, 197 tiles";
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, (kColumnGroupsBelowCtas - 1) * 128), 4).parts, kColumnGroups);
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, kColumnGroupsBelowCtas * 128), 4).parts, 1);
  const ReduceConfig bf16 = plan_reduce_kernel(column(1, 4096, 32768), 2);
  EXPECT_EQ(bf16.tiles, 32768 / (kReduceThreads / kColumnRowLanes * 8));
  EXPECT_EQ(bf16.parts, kColumnGroups);
  // Fewer segments than groups: one part per segment.
  const ReduceConfig short_k = plan_reduce_kernel(column(1, 600, 16384), 4);
  EXPECT_EQ(short_k.chunks, 3);
  EXPECT_EQ(short_k.parts, 3);
}

TEST(ReduceConfig, ColumnPartsOnlySpreadWork) {
  // parts is 1, min(8, segments) or segments, and never changes the segments (the arithmetic).
  for (int64_t k : {1, 100, 129, 1037, 1300, 4096, 4099, 32768, 100003}) {
    const ReduceConfig ref = plan_reduce_kernel(column(1, k, 1), 4);
    for (int64_t outer : {1, 3, 64}) {
      for (int64_t inner : {2, 128, 1024, 4096, 32768, 262144}) {
        const ReduceConfig c = plan_reduce_kernel(column(outer, k, inner), 4);
        EXPECT_EQ(c.chunk, ref.chunk);
        EXPECT_EQ(c.chunks, ref.chunks);
        EXPECT_EQ(c.column_row_lanes, ref.column_row_lanes);
        EXPECT_TRUE(c.parts == 1 || c.parts == c.chunks || c.parts == std::min<int64_t>(kColumnGroups, c.chunks))
            << "k=" << k << " parts=" << c.parts;
        EXPECT_EQ(c.grid, std::min(outer * c.tiles * c.parts, kMaxGrid));
        if (c.chunks == 1) EXPECT_EQ(c.parts, 1);
      }
    }
  }
}

TEST(ReduceConfig, ColumnKnobsOverrideTheDefaults) {
  EXPECT_EQ(ReduceKnobs{}.min_segment_rows, kColumnMinSegmentRows);
  ReduceKnobs k;
  k.min_segment_rows = 500;  // rounded up to whole 64-row steps
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 128), 4, k).chunk, 512);
  k = ReduceKnobs{};
  k.groups_below_ctas = 0;  // never one CTA per group: one per tile
  const ReduceConfig whole = plan_reduce_kernel(column(1, 4096, 32768), 4, k);
  EXPECT_EQ(whole.parts, 1);
  EXPECT_EQ(whole.chunk, plan_reduce_kernel(column(1, 4096, 32768), 4).chunk);
  k = ReduceKnobs{};
  k.split_below_vectors = 1 << 30;  // always one CTA per segment
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 32768), 4, k).parts, 16);
}

TEST(ReduceConfig, AllPathUsesOneWaveOfCtasAndATicket) {
  const ReduceConfig small = plan_reduce_kernel(all(1000), 4);
  EXPECT_EQ(small.kernel, ReduceKernel::kAll);
  EXPECT_EQ(small.grid, 1);
  EXPECT_EQ(small.workspace_bytes, 0u);
  const ReduceConfig mid = plan_reduce_kernel(all(1 << 20), 4);
  EXPECT_EQ(mid.grid, (1 << 20) / (kReduceThreads * kReduceUnroll * 4));
  EXPECT_EQ(mid.tickets, 1);
  const ReduceConfig big = plan_reduce_kernel(all(int64_t(1) << 28), 2);
  EXPECT_EQ(big.grid, kAllMaxCtas);
  EXPECT_EQ(big.chunk, kReduceThreads * kReduceUnroll * 8);
}

// ---- randomized properties -------------------------------------------------------------------

// A random canonical problem of elem-byte elements: rows, columns or everything, with extents up
// to what a view may name (at most 2^62 elements: expanded dims make that many without the
// memory; rows and row lengths past 2^31), an empty one now and then.
ReductionPlan random_problem(std::mt19937_64& rng) {
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int budget = 62;  // log2 of the elements left
  const auto extent = [&](int most_bits) {
    const int bits = static_cast<int>(uniform(0, std::min(budget, most_bits)));
    budget -= bits;
    return bits == 0 ? uniform(1, 2) : uniform(int64_t(1) << (bits - 1), (int64_t(1) << bits) - 1) + 1;
  };
  ReductionPlan p;
  switch (uniform(0, 2)) {
    case 0: p = row(extent(40), extent(44)); break;
    case 1: {
      const int64_t k = extent(36), outer = extent(34);
      p = column(outer, k, std::max<int64_t>(2, extent(40)));
      break;
    }
    default: p = all(extent(62)); break;
  }
  if (uniform(0, 19) == 0) p.reduced = 0;  // empty reduced sets
  if (uniform(0, 19) == 0) p.outer = 0, p.out_numel = 0;  // no outputs
  return p;
}

// Every config of a random problem launches as the kernels (reduce_engine.cuh) and the launcher
// (reduce_launch.cuh) take it: a grid of 1..kMaxGrid CTAs (cast to unsigned), a built layout,
// chunks and segments covering the reduced extent once, tiles covering the inner extent, 32-bit
// tickets, and a workspace holding every ticket and partial the kernels index, without wrapping.
TEST(ReduceConfigRandom, EveryConfigLaunchesWithinTheKernelsBounds) {
  std::mt19937_64 rng(1618);
  int kernels[6] = {};
  for (int trial = 0; trial < 20000; ++trial) {
    const ReductionPlan p = random_problem(rng);
    const int elem = 2 << (rng() % 3);
    const ReduceConfig c = plan_reduce_kernel(p, elem);
    SCOPED_TRACE(testing::Message() << reduction_kind_name(p.kind) << " [" << p.outer << ", " << p.reduced << ", "
                                    << p.inner << "] elem=" << elem << ": " << reduce_kernel_name(c.kernel) << " chunk="
                                    << c.chunk << " chunks=" << c.chunks << " parts=" << c.parts << " tiles="
                                    << c.tiles << " grid=" << c.grid);
    ++kernels[static_cast<int>(c.kernel)];
    const int vec = 16 / elem;
    ASSERT_EQ(c.vec, vec);
    if (c.kernel == ReduceKernel::kNothing) {
      ASSERT_TRUE(p.out_numel == 0 || p.outer == 0) << "outputs left unwritten";
      continue;
    }
    ASSERT_GE(c.grid, 1);
    ASSERT_LE(c.grid, kMaxGrid);
    ASSERT_LE(c.grid, int64_t(UINT_MAX));
    switch (c.kernel) {
      case ReduceKernel::kFill:
        ASSERT_EQ(p.reduced, 0);
        break;
      case ReduceKernel::kRowWarp:  // launch_row_warp: 1..32 lanes, a power of two
        ASSERT_EQ(p.kind, ReductionKind::kRow);
        ASSERT_TRUE(c.lanes >= 1 && c.lanes <= 32 && (c.lanes & (c.lanes - 1)) == 0) << c.lanes;
        break;
      case ReduceKernel::kRowBlock:  // item = row * chunks + chunk; a ticket a row
        ASSERT_EQ(p.kind, ReductionKind::kRow);
        ASSERT_GE(__int128(c.chunk) * c.chunks, p.reduced);
        ASSERT_LT(__int128(c.chunk) * (c.chunks - 1), p.reduced);
        ASSERT_LE(c.chunks, int64_t(UINT_MAX)) << "a 32-bit ticket counts the chunks";
        if (c.chunks > 1) {
          ASSERT_GE(c.tickets, p.outer);
          ASSERT_GE(__int128(c.partials), __int128(p.outer) * c.chunks);
        }
        break;
      case ReduceKernel::kColumn: {
        ASSERT_EQ(p.kind, ReductionKind::kColumn);
        ASSERT_TRUE(c.column_row_lanes == 1 || c.column_row_lanes == kColumnRowLanes) << "no such kernel built";
        ASSERT_EQ(c.chunk % (int64_t(c.column_row_lanes) * kColumnUnroll), 0) << "segments of whole steps";
        ASSERT_GE(__int128(c.chunk) * c.chunks, p.reduced);
        ASSERT_LT(__int128(c.chunk) * (c.chunks - 1), p.reduced);
        const int64_t columns_per_cta = int64_t(kReduceThreads / c.column_row_lanes) * vec;
        ASSERT_GE(__int128(c.tiles) * columns_per_cta, p.inner);
        ASSERT_LT(__int128(c.tiles - 1) * columns_per_cta, p.inner);
        // Parts: one CTA a tile, a (tile, group) or a (tile, segment); CTA p publishes as group p % G.
        ASSERT_TRUE(c.parts == 1 || c.parts == c.chunks || c.parts == std::min<int64_t>(c.column_row_lanes, c.chunks));
        ASSERT_LE(c.parts, int64_t(UINT_MAX)) << "a 32-bit ticket counts the parts";
        // The kernel's item count, outer * tiles * parts, is an int64.
        ASSERT_LE(__int128(p.outer) * c.tiles * c.parts, __int128(INT64_MAX));
        if (c.split()) {
          ASSERT_GE(__int128(c.tickets), __int128(p.outer) * c.tiles) << "a ticket a (outer, tile) slice";
          ASSERT_GE(__int128(c.partials), __int128(c.parts) * p.outer * p.inner) << "partials[part][outer][inner]";
        }
        break;
      }
      case ReduceKernel::kAll:
        ASSERT_EQ(c.grid, c.chunks) << "reduce_all_kernel steps by gridDim.x chunks";
        ASSERT_LE(c.chunks, kAllMaxCtas);
        ASSERT_EQ(c.chunk, int64_t(kReduceThreads) * kReduceUnroll * vec);
        if (c.chunks > 1) {
          ASSERT_GE(c.tickets, 1);
          ASSERT_GE(c.partials, c.chunks);
        }
        break;
      default:
        FAIL() << "unknown kernel";
    }
    // The workspace: the zeroed tickets first (whole kWorkspaceAlign blocks), then the partial slots.
    ASSERT_EQ(c.zeroed_bytes % kWorkspaceAlign, 0u);
    ASSERT_GE(__int128(c.zeroed_bytes), __int128(c.tickets) * 4);
    ASSERT_GE(__int128(c.workspace_bytes), __int128(c.zeroed_bytes) + __int128(c.partials) * kPartialSlotBytes)
        << "the workspace size wrapped";
  }
  // The generator must reach every kernel, or this test proves little.
  for (int k = 1; k < 6; ++k) EXPECT_GT(kernels[k], 200) << reduce_kernel_name(static_cast<ReduceKernel>(k));
}

// Batch invariance at random: an output's arithmetic (the kernel a row takes, its lanes and
// chunks; a column's lanes down K and its segments; the all path's chunks) depends on the reduced
// extent and the element size only, under any column knobs, whatever the outer and inner extents.
TEST(ReduceConfigRandom, ArithmeticDependsOnTheReducedExtentOnly) {
  std::mt19937_64 rng(2718);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 20000; ++trial) {
    ReductionPlan p = random_problem(rng);
    if (p.outer == 0 || p.reduced == 0 || p.kind == ReductionKind::kAll) continue;
    const int elem = 2 << (rng() % 3);
    ReduceKnobs knobs;
    if (uniform(0, 1) == 0) {  // a sweep's overrides
      knobs.row_warp_max_vectors = uniform(0, 1 << 16);
      knobs.min_segment_rows = uniform(0, 4096);
      knobs.max_segments = uniform(0, 1024);
      knobs.split_below_vectors = uniform(0, int64_t(1) << 24);
      knobs.groups_below_ctas = uniform(0, 4096);
    }
    // The same reduced extent with one output, and with a random count of them.
    ReductionPlan one = p, other = p;
    const int64_t outer = uniform(1, int64_t(1) << 20), inner = uniform(2, int64_t(1) << 20);
    if (p.kind == ReductionKind::kRow) {
      one = row(1, p.reduced);
      other = row(outer, p.reduced);
    } else {
      one = column(1, p.reduced, 2);
      other = column(outer, p.reduced, inner);
    }
    const ReduceConfig a = plan_reduce_kernel(p, elem, knobs), b = plan_reduce_kernel(one, elem, knobs),
                       c = plan_reduce_kernel(other, elem, knobs);
    SCOPED_TRACE(testing::Message() << reduction_kind_name(p.kind) << " [" << p.outer << ", " << p.reduced << ", "
                                    << p.inner << "] vs outer " << outer << " inner " << inner << " elem=" << elem);
    for (const ReduceConfig* x : {&b, &c}) {
      ASSERT_EQ(x->kernel, a.kernel);
      ASSERT_EQ(x->lanes, a.lanes);
      ASSERT_EQ(x->chunk, a.chunk);
      ASSERT_EQ(x->chunks, a.chunks);
      ASSERT_EQ(x->column_row_lanes, a.column_row_lanes);
    }
  }
}

TEST(ReduceConfig, EmptyProblems) {
  EXPECT_EQ(plan_reduce_kernel(row(0, 10), 4).kernel, ReduceKernel::kNothing);
  ReductionPlan empty_sets = row(5, 0);
  const ReduceConfig c = plan_reduce_kernel(empty_sets, 4);
  EXPECT_EQ(c.kernel, ReduceKernel::kFill);
  EXPECT_EQ(c.grid, 1);
  EXPECT_EQ(c.workspace_bytes, 0u);
}

}  // namespace
}  // namespace reducekit
