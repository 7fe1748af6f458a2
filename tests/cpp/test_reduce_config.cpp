// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_reduce_kernel: the strategy per extent, the workspace it asks for, and the
// batch-invariance rule (an output's arithmetic depends on the reduced extent and dtype only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

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
  ColumnKnobs knobs;
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
  // 4096 x 32768 float32: 256 tiles cannot fill the GPU with one CTA each; one CTA per (tile,
  // group of segments) instead, 8 partials per column.
  const ReduceConfig mid = plan_reduce_kernel(column(1, 4096, 32768), 4);
  EXPECT_TRUE(mid.split());
  EXPECT_EQ(mid.parts, kColumnGroups);
  EXPECT_EQ(mid.grid, mid.tiles * kColumnGroups);
  EXPECT_EQ(mid.tickets, mid.tiles);
  EXPECT_EQ(mid.partials, kColumnGroups * 32768);
  const ReduceConfig bf16 = plan_reduce_kernel(column(1, 4096, 32768), 2);
  EXPECT_EQ(bf16.tiles, 32768 / (kReduceThreads / kColumnRowLanes * 8));
  EXPECT_EQ(bf16.parts, kColumnGroups);
  // Fewer segments than groups: one part per segment.
  const ReduceConfig short_k = plan_reduce_kernel(column(1, 600, 40000), 4);
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
  EXPECT_EQ(ColumnKnobs{}.min_segment_rows, kColumnMinSegmentRows);
  ColumnKnobs k;
  k.min_segment_rows = 500;  // rounded up to whole 64-row steps
  EXPECT_EQ(plan_reduce_kernel(column(1, 4096, 128), 4, k).chunk, 512);
  k = ColumnKnobs{};
  k.groups_below_ctas = 0;  // never one CTA per group: one per tile
  const ReduceConfig whole = plan_reduce_kernel(column(1, 4096, 32768), 4, k);
  EXPECT_EQ(whole.parts, 1);
  EXPECT_EQ(whole.chunk, plan_reduce_kernel(column(1, 4096, 32768), 4).chunk);
  k = ColumnKnobs{};
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
