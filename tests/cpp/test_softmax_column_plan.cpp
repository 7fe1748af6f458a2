// SPDX-License-Identifier: Apache-2.0
// Host tests for the softmax column plan: which tensors are column problems, the tile shape
// and staging choice (a function of K, element size and inputs only: batch invariance rests on
// it), shared-memory accounting, CTA counts and the copy fallback.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "plan/softmax_column_plan.hpp"

namespace reducekit {
namespace {

constexpr std::size_t kSmem = 227 * 1024;

TensorView dense(const std::vector<int64_t>& sizes) {
  TensorView v;
  v.dtype = DType::kFloat32;
  v.rank = static_cast<int>(sizes.size());
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = stride;
    stride *= sizes[d];
  }
  return v;
}

SoftmaxColumnPlan plan_of(ColumnExtents e, int elem_bytes, int inputs, int stat_bytes = 8, int param_bytes = 8) {
  SoftmaxColumnPlan p;
  const Status s = plan_softmax_columns(e, elem_bytes, inputs, stat_bytes, param_bytes, kSmem, &p);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return p;
}

TEST(SoftmaxColumnPlan, DenseExtentsOfNchw) {
  ColumnExtents e;
  ASSERT_TRUE(dense_column_extents(dense({32, 19, 128, 128}), 1, &e));
  EXPECT_EQ(e.outer, 32);
  EXPECT_EQ(e.reduced, 19);
  EXPECT_EQ(e.inner, 128 * 128);
  ASSERT_TRUE(dense_column_extents(dense({5, 6, 7}), 0, &e));
  EXPECT_EQ(e.outer, 1);
  EXPECT_EQ(e.reduced, 5);
  EXPECT_EQ(e.inner, 42);
}

TEST(SoftmaxColumnPlan, RejectsInnermostSlicedPermutedAndEmpty) {
  ColumnExtents e;
  EXPECT_FALSE(dense_column_extents(dense({4, 8}), 1, &e)) << "innermost dim: the row path";
  EXPECT_FALSE(dense_column_extents(dense({4, 8, 1}), 1, &e)) << "only size-1 dims after dim: inner 1";
  TensorView sliced = dense({4, 8, 6});
  sliced.strides[0] = 64;  // rows of a wider buffer
  EXPECT_FALSE(dense_column_extents(sliced, 1, &e));
  TensorView permuted = dense({4, 8});
  permuted.strides[0] = 1;
  permuted.strides[1] = 4;
  EXPECT_FALSE(dense_column_extents(permuted, 0, &e));
  EXPECT_FALSE(dense_column_extents(dense({4, 0, 6}), 1, &e));
  EXPECT_FALSE(dense_column_extents(dense({4, 8, 6}), 3, &e)) << "dim out of range";
}

TEST(SoftmaxColumnPlan, SizeOneDimsMayHaveAnyStride) {
  TensorView v = dense({3, 1, 5, 7});
  v.strides[1] = 12345;
  ColumnExtents e;
  ASSERT_TRUE(dense_column_extents(v, 2, &e));
  EXPECT_EQ(e.outer, 3);
  EXPECT_EQ(e.reduced, 5);
  EXPECT_EQ(e.inner, 7);
}

// The four target shapes (softmax over dim 1): staged where the tile fits, widths as the table says.
TEST(SoftmaxColumnPlan, TargetShapes) {
  const SoftmaxColumnPlan a = plan_of({32, 19, 16384}, 4, 1);
  EXPECT_TRUE(a.staged);
  EXPECT_EQ(a.col_vectors, 128);  // 19 x 128 x 16 B = 38 KB <= 48 KB; 256 would be 76 KB
  EXPECT_EQ(a.k_lanes, 2);
  EXPECT_EQ(a.width, 512);
  EXPECT_EQ(a.ctas, 32 * 32);
  EXPECT_EQ(a.buffers, 2) << "the next tile's copy beside this one";

  const SoftmaxColumnPlan b = plan_of({32, 150, 16384}, 2, 1);
  EXPECT_TRUE(b.staged);
  EXPECT_EQ(b.col_vectors, 16);
  EXPECT_EQ(b.k_lanes, 16);
  EXPECT_EQ(b.width, 128);  // 16 vectors of 8 bf16

  const SoftmaxColumnPlan c = plan_of({32, 1000, 4096}, 4, 1);
  EXPECT_TRUE(c.staged);
  EXPECT_EQ(c.col_vectors, kColumnMinVectors);  // 32 B a row: 1000 x 32 B = 32 KB
  EXPECT_EQ(c.tile_bytes, 1000u * 32);
  EXPECT_EQ(c.buffers, 2);

  const SoftmaxColumnPlan d = plan_of({64, 4096, 256}, 4, 1);
  EXPECT_TRUE(d.staged) << "4096 x 32 B = 128 KiB, kColumnStageMaxBytes";
  EXPECT_EQ(d.col_vectors, kColumnMinVectors);
  EXPECT_EQ(d.tile_bytes, 4096u * 32);
  EXPECT_EQ(d.buffers, 1);
  EXPECT_EQ(d.ctas, 64 * (256 / 8));

  const SoftmaxColumnPlan e = plan_of({64, 4097, 256}, 4, 1);
  EXPECT_FALSE(e.staged) << "past 128 KiB: two reads";
  EXPECT_EQ(e.col_vectors, kColumnStreamVectors);
  EXPECT_EQ(e.tile_bytes, 0u);
  EXPECT_EQ(e.ctas, d.ctas);
}

// Batch invariance: the layout of a column's arithmetic (k_lanes) and the staging choice must not
// move with outer or inner.
TEST(SoftmaxColumnPlan, ColumnArithmeticDependsOnKAndDtypeOnly) {
  for (int64_t k : {1, 2, 7, 150, 1000, 1600, 1601, 3200, 3201, 5000}) {
    for (int elem : {2, 4, 8}) {
      for (int inputs : {1, 2}) {
        const SoftmaxColumnPlan ref = plan_of({1, k, 16384}, elem, inputs);
        for (ColumnExtents e : {ColumnExtents{64, k, 3}, ColumnExtents{7, k, 1001}, ColumnExtents{1, k, 2}}) {
          SoftmaxColumnPlan p;
          ASSERT_TRUE(plan_softmax_columns(e, elem, inputs, 8, 8, kSmem, &p).is_ok());
          EXPECT_EQ(p.k_lanes, ref.k_lanes) << "K=" << k << " elem=" << elem << " inputs=" << inputs;
          EXPECT_EQ(p.staged, ref.staged) << "K=" << k;
        }
        EXPECT_EQ(ref.k_lanes * ref.col_vectors, kColumnSoftmaxThreads);
        EXPECT_EQ(ref.k_lanes & (ref.k_lanes - 1), 0) << "the lane tree halves R";
      }
    }
  }
}

TEST(SoftmaxColumnPlan, StagedUpTo4096RowsForwardAnd1600Backward) {
  EXPECT_TRUE(plan_of({8, 4096, 4096}, 2, 1).staged);
  EXPECT_FALSE(plan_of({8, 4097, 4096}, 2, 1).staged);
  EXPECT_TRUE(plan_of({8, 1600, 4096}, 8, 2).staged);
  EXPECT_FALSE(plan_of({8, 1601, 4096}, 8, 2).staged);
}

TEST(SoftmaxColumnPlan, SharedMemoryAccountsForTileStatisticsAndParameters) {
  for (int64_t k : {1, 19, 150, 1000, 3000, 5000}) {
    const SoftmaxColumnPlan p = plan_of({4, k, 4096}, 2, 1, 8, 8);
    const std::size_t tile = p.staged ? static_cast<std::size_t>(k) * p.col_vectors * 16 : 0;
    EXPECT_EQ(p.tile_bytes, tile);
    EXPECT_EQ(p.buffers, p.staged && 2 * tile + kColumnSoftmaxThreads * 8u * 8 + p.col_vectors * 8u * 8 <= kSmem ? 2 : 1)
        << "K=" << k;
    EXPECT_EQ(p.smem_bytes, p.buffers * tile + kColumnSoftmaxThreads * 8u * 8 + p.col_vectors * 8u * 8) << "K=" << k;
    EXPECT_LE(p.smem_bytes, kSmem);
  }
  // A device whose shared memory cannot hold the planned tile streams instead.
  SoftmaxColumnPlan small;
  ASSERT_TRUE(plan_softmax_columns({8, 3000, 4096}, 4, 1, 8, 8, 64 * 1024, &small).is_ok());
  EXPECT_FALSE(small.staged);
  EXPECT_LE(small.smem_bytes, 64u * 1024);
}

// The narrowest staged tile is an override (column_min_vectors): at 1, a K of 6000 (64x6000x256)
// stages a one-vector tile of 94 KiB instead of reading x twice; the default keeps 2 vectors (a
// whole sector a row) and reads such columns twice. The override must be a power of two.
TEST(SoftmaxColumnPlan, NarrowestStagedTileIsAnOverride) {
  for (int elem : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "elem " << elem);
    const SoftmaxColumnPlan d = plan_of({64, 6000, 256}, elem, 1);
    EXPECT_FALSE(d.staged);
    EXPECT_EQ(d.col_vectors, kColumnStreamVectors);
    SoftmaxColumnPlan one;
    ASSERT_TRUE(plan_softmax_columns({64, 6000, 256}, elem, 1, 8, 8, kSmem, &one, 1).is_ok());
    EXPECT_TRUE(one.staged);
    EXPECT_EQ(one.col_vectors, 1);
    EXPECT_EQ(one.k_lanes, kColumnSoftmaxThreads);
    EXPECT_EQ(one.tile_bytes, 6000u * 16);
    EXPECT_EQ(one.ctas, 64 * 256 / (16 / elem));
    SoftmaxColumnPlan long_k;
    ASSERT_TRUE(plan_softmax_columns({8, 9000, 256}, elem, 1, 8, 8, kSmem, &long_k, 1).is_ok());
    EXPECT_FALSE(long_k.staged) << "past 128 KiB even one vector wide";
    EXPECT_EQ(long_k.col_vectors, kColumnStreamVectors);
  }
  SoftmaxColumnPlan p;
  for (int bad : {0, 3, 2 * kColumnSoftmaxThreads}) {
    const Status s = plan_softmax_columns({1, 4, 4}, 4, 1, 8, 8, kSmem, &p, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("min_vectors:", 0), 0u) << s.message();
  }
}

// The largest staged tile: by default 128 KiB for one input (a K of 4096 stages its two-vector
// tile, one CTA an SM) and 100 KiB for two (a backward K of 2048 reads twice); the override
// (column_stage_max_bytes) sets both, at the two-read plan's width. A device that cannot hold the
// tile streams.
TEST(SoftmaxColumnPlan, LargestStagedTileIsAnOverride) {
  constexpr std::size_t kSmall = 100 * 1024, kBig = 200 * 1024;
  for (int elem : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "elem " << elem);
    const SoftmaxColumnPlan d = plan_of({64, 4096, 256}, elem, 1);
    ASSERT_TRUE(d.staged);
    EXPECT_EQ(d.tile_bytes, 4096u * 32);
    EXPECT_EQ(d.buffers, 1);
    EXPECT_LE(d.smem_bytes, kSmem);
    SoftmaxColumnPlan small;
    ASSERT_TRUE(plan_softmax_columns({64, 4096, 256}, elem, 1, 8, 8, kSmem, &small, kColumnMinVectors, kSmall).is_ok());
    EXPECT_FALSE(small.staged) << "the override at 100 KiB";
    EXPECT_EQ(small.col_vectors, d.col_vectors);
    EXPECT_EQ(small.k_lanes, d.k_lanes);
    EXPECT_EQ(small.ctas, d.ctas);
    SoftmaxColumnPlan big;
    ASSERT_TRUE(plan_softmax_columns({64, 6000, 256}, elem, 1, 8, 8, kSmem, &big, kColumnMinVectors, kBig).is_ok());
    EXPECT_TRUE(big.staged) << "the override at 200 KiB: 6000 x 32 B";
    EXPECT_FALSE(plan_of({64, 6000, 256}, elem, 1).staged);
    EXPECT_FALSE(plan_of({64, 2048, 256}, elem, 2).staged) << "two inputs: 128 KiB";
    EXPECT_TRUE(plan_of({64, 1600, 256}, elem, 2).staged);
    SoftmaxColumnPlan backward;
    ASSERT_TRUE(plan_softmax_columns({64, 2048, 256}, elem, 2, 8, 8, kSmem, &backward, kColumnMinVectors, kBig).is_ok());
    EXPECT_TRUE(backward.staged) << "the override sets two inputs' too";
    SoftmaxColumnPlan device;
    ASSERT_TRUE(plan_softmax_columns({64, 4096, 256}, elem, 1, 8, 8, 100 * 1024, &device).is_ok());
    EXPECT_FALSE(device.staged) << "100 KiB of shared memory";
    EXPECT_EQ(device.col_vectors, d.col_vectors);
  }
}

TEST(SoftmaxColumnPlan, TilesCoverTheInnerExtent) {
  for (int64_t inner : {2, 3, 8, 64, 1001, 16384}) {
    const SoftmaxColumnPlan p = plan_of({3, 150, inner}, 4, 1);
    EXPECT_GE(p.tiles_per_slab * p.width, inner);
    EXPECT_LT((p.tiles_per_slab - 1) * p.width, inner);
    EXPECT_EQ(p.ctas, 3 * p.tiles_per_slab);
  }
}

TEST(SoftmaxColumnPlan, BadArgumentsNameThemselves) {
  SoftmaxColumnPlan p;
  Status s = plan_softmax_columns({1, 4, 1}, 4, 1, 8, 8, kSmem, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("x:", 0), 0u) << s.message();
  s = plan_softmax_columns({1, 4, 4}, 3, 1, 8, 8, kSmem, &p);
  EXPECT_EQ(s.message().rfind("elem_bytes:", 0), 0u) << s.message();
  s = plan_softmax_columns({1, 4, 4}, 4, 3, 8, 8, kSmem, &p);
  EXPECT_EQ(s.message().rfind("inputs:", 0), 0u) << s.message();
  EXPECT_EQ(plan_softmax_columns({1, 4, 4}, 4, 1, 8, 8, kSmem, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reducekit
