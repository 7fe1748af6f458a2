// Host tests for plan_reduce_kernel: the strategy per extent, the workspace it asks for, and the
// batch-invariance rule (an output's arithmetic depends on the reduced extent and dtype only).
#include <gtest/gtest.h>

#include <cstdint>

#include "ops/reduce_config.hpp"

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
    EXPECT_LE(a.chunks, kColumnMaxSegments);
    EXPECT_EQ(a.chunk % (kColumnRowLanes * kColumnUnroll), 0);
    EXPECT_GE(a.chunk * a.chunks, k);
    EXPECT_LT(a.chunk * (a.chunks - 1), k);
  }
}

TEST(ReduceConfig, FewColumnsSplitSegmentsOverCtas) {
  const ReduceConfig few = plan_reduce_kernel(column(1, 4096, 128), 4);
  EXPECT_TRUE(few.split);
  EXPECT_EQ(few.tiles, 1);
  EXPECT_EQ(few.grid, few.chunks);
  EXPECT_EQ(few.tickets, 1);
  EXPECT_EQ(few.partials, few.chunks * 128);
  const ReduceConfig many = plan_reduce_kernel(column(1, 4096, 32768), 4);
  EXPECT_FALSE(many.split);
  EXPECT_EQ(many.tiles, 32768 / (kReduceThreads / kColumnRowLanes * 4));
  EXPECT_EQ(many.grid, many.tiles);
  EXPECT_EQ(many.workspace_bytes, 0u);
  EXPECT_FALSE(plan_reduce_kernel(column(1, 64, 33), 4).split) << "one segment: nothing to split";
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
