// SPDX-License-Identifier: Apache-2.0
// Host tests for the softmax column plan: which tensors are column problems, the tile shape
// and staging choice (a function of K, element size and inputs only: batch invariance rests on
// it), shared-memory accounting, CTA counts and the copy fallback.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <random>
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

// The plan under overrides, which must be accepted.
SoftmaxColumnPlan plan_with(ColumnExtents e, int elem_bytes, int inputs, const SoftmaxColumnOverrides& o,
                            std::size_t smem = kSmem) {
  SoftmaxColumnPlan p;
  const Status s = plan_softmax_columns(e, elem_bytes, inputs, 8, 8, smem, &p, o);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return p;
}

// The plan without the widening of 32-byte rows (the column_wide_vectors=1 override).
SoftmaxColumnPlan narrow_plan_of(ColumnExtents e, int elem_bytes, int inputs) {
  SoftmaxColumnOverrides o;
  o.wide_vectors = 1;
  return plan_with(e, elem_bytes, inputs, o);
}

// An override out of range is refused, the message naming it.
void expect_refused(const SoftmaxColumnOverrides& o, const char* name) {
  SoftmaxColumnPlan p;
  const Status s = plan_softmax_columns({1, 4, 4}, 4, 1, 8, 8, kSmem, &p, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
  EXPECT_EQ(s.message().rfind(name, 0), 0u) << s.message();
}

// A staged plan's tile: CTAs a tile and rows of K each, width in vectors, bytes a CTA stages,
// buffers, tiles.
struct StagedTile {
  int split;
  int64_t band;
  int col_vectors;
  std::size_t tile_bytes;
  int buffers;
  int64_t tiles;
};

// A staged tile of `split` CTAs, `band` rows of K each, `vectors` wide (k_lanes down K), staging
// tile_bytes a CTA.
void expect_band(const SoftmaxColumnPlan& p, int split, int64_t band, int vectors, std::size_t tile_bytes) {
  EXPECT_TRUE(p.staged);
  EXPECT_EQ(p.split, split);
  EXPECT_EQ(p.band, band);
  EXPECT_EQ(p.col_vectors, vectors);
  EXPECT_EQ(p.k_lanes, kColumnSoftmaxThreads / vectors);
  EXPECT_EQ(p.tile_bytes, tile_bytes);
}

void expect_staged(const SoftmaxColumnPlan& p, const StagedTile& t) {
  expect_band(p, t.split, t.band, t.col_vectors, t.tile_bytes);
  EXPECT_EQ(p.buffers, t.buffers);
  EXPECT_EQ(p.tiles, t.tiles);
}

// The plan of lone CTAs (no split tiles: the column_max_split=1 override).
SoftmaxColumnPlan lone_plan_of(ColumnExtents e, int elem_bytes, int inputs, int min_vectors = kColumnMinVectors,
                               std::size_t stage_max_bytes = 0, std::size_t smem = kSmem) {
  SoftmaxColumnOverrides o;
  o.min_vectors = min_vectors;
  o.stage_max_bytes = stage_max_bytes;
  o.max_split = 1;
  const SoftmaxColumnPlan p = plan_with(e, elem_bytes, inputs, o, smem);
  EXPECT_EQ(p.split, 1);
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

// The four target shapes (softmax over dim 1): staged where the tile fits, widths as the table says;
// a K of 4096 on split tiles (lone CTAs: the whole 128 KiB tile, then two reads).
TEST(SoftmaxColumnPlan, TargetShapes) {
  const SoftmaxColumnPlan a = plan_of({32, 19, 16384}, 4, 1);
  EXPECT_TRUE(a.staged);
  EXPECT_EQ(a.col_vectors, 128);  // 19 x 128 x 16 B = 38 KB <= 48 KB; 256 would be 76 KB
  EXPECT_EQ(a.k_lanes, 2);
  EXPECT_EQ(a.width, 512);
  EXPECT_EQ(a.tiles, 32 * 32);
  EXPECT_EQ(a.buffers, 2) << "the next tile's copy beside this one";

  const SoftmaxColumnPlan b = plan_of({32, 150, 16384}, 2, 1);
  EXPECT_TRUE(b.staged);
  EXPECT_EQ(b.col_vectors, 16);
  EXPECT_EQ(b.k_lanes, 16);
  EXPECT_EQ(b.width, 128);  // 16 vectors of 8 bf16

  // 1000 x 32 B = 32 KB, the narrowest tile within the target, widens to 1000 x 64 B: two buffers
  expect_staged(plan_of({32, 1000, 4096}, 4, 1), {1, 1000, kColumnWideVectors, 1000u * 64, 2, 32 * (4096 / 16)});
  expect_staged(narrow_plan_of({32, 1000, 4096}, 4, 1), {1, 1000, kColumnMinVectors, 1000u * 32, 2, 32 * (4096 / 8)});
  // 4096 x 32 B = 128 KiB: four bands of 32 KiB, widened to four of 64 KiB
  expect_staged(plan_of({64, 4096, 256}, 4, 1), {4, 1024, kColumnWideVectors, 1024u * 64, 2, 64 * (256 / 16)});
  expect_staged(narrow_plan_of({64, 4096, 256}, 4, 1), {4, 1024, kColumnMinVectors, 1024u * 32, 2, 64 * (256 / 8)});
  // lone CTAs: the whole 128 KiB tile (kColumnStageMaxBytes), one buffer
  const SoftmaxColumnPlan lone = lone_plan_of({64, 4096, 256}, 4, 1);
  expect_staged(lone, {1, 4096, kColumnMinVectors, 4096u * 32, 1, 64 * (256 / 8)});

  const SoftmaxColumnPlan e = lone_plan_of({64, 4097, 256}, 4, 1);
  EXPECT_FALSE(e.staged) << "past 128 KiB: two reads";
  EXPECT_EQ(e.col_vectors, kColumnStreamVectors);
  EXPECT_EQ(e.tile_bytes, 0u);
  EXPECT_EQ(e.tiles, lone.tiles);
}

// A column length K of an element size and input count, and the CTAs and width its plan takes.
struct Case {
  int64_t k;
  int elem, inputs, split, vectors;
};

// The plan of [8, K, 4096] is staged as `c` says; uneven bands where the split does not divide K.
void expect_case(const SoftmaxColumnPlan& p, const Case& c) {
  const int64_t band = (c.k + c.split - 1) / c.split;
  expect_band(p, c.split, band, c.vectors, static_cast<std::size_t>(band) * c.vectors * 16 * c.inputs);
}

// Where the narrowest tile passes kColumnSplitFromBytes, the smallest cluster whose bands fit the
// target takes the tile (uneven bands where split does not divide K); up to it, or past eight
// CTAs, the lone CTA's rules.
TEST(SoftmaxColumnPlan, SplitTilesTakeTheSmallestClusterWhoseBandsFit) {
  for (const Case c : {Case{1536, 4, 1, 1, 2}, Case{2048, 4, 1, 1, 2}, Case{2049, 4, 1, 2, 2}, Case{2049, 2, 1, 2, 2},
                       Case{3072, 8, 1, 2, 2}, Case{3073, 4, 1, 4, 2}, Case{4096, 2, 1, 4, 2}, Case{6000, 4, 1, 4, 2},
                       Case{12288, 2, 1, 8, 2}, Case{1024, 4, 2, 1, 2}, Case{1025, 4, 2, 2, 2}, Case{1600, 2, 2, 4, 2},
                       Case{6144, 4, 2, 8, 2}, Case{2000, 4, 1, 1, 2}, Case{700, 4, 1, 1, 4}}) {
    SCOPED_TRACE(testing::Message() << "K " << c.k << " elem " << c.elem << " inputs " << c.inputs);
    const SoftmaxColumnPlan p = narrow_plan_of({8, c.k, 4096}, c.elem, c.inputs);
    expect_case(p, c);
    if (c.split > 1) EXPECT_LE(p.tile_bytes, kColumnStageTargetBytes);
    EXPECT_EQ(p.smem_bytes,
              p.buffers * p.tile_bytes + kColumnSoftmaxThreads * (16u / c.elem) * 8 +
                  p.col_vectors * (16u / c.elem) * (8 + (c.split > 1 ? 8 : 0)))
        << "a split tile's merged statistics beside the parameters";
  }
  // Past eight bands of the target: the lone CTA's rules (two reads here).
  const SoftmaxColumnPlan past = plan_of({8, 12289, 4096}, 2, 1);
  EXPECT_FALSE(past.staged) << "nor eight bands of 64-byte rows";
  EXPECT_EQ(past.split, 1);
  EXPECT_EQ(past.band, 12289);
  SoftmaxColumnOverrides o;
  for (int bad : {0, 3, 2 * kColumnMaxSplit}) {
    o.max_split = bad;
    expect_refused(o, "max_split:");
  }
  o.max_split = 2;
  SoftmaxColumnPlan p;
  ASSERT_TRUE(plan_softmax_columns({8, 4096, 4096}, 4, 1, 8, 8, kSmem, &p, o).is_ok());
  EXPECT_EQ(p.split, 1) << "the override caps the cluster at two: bands of 64 KiB pass the target";
  EXPECT_EQ(p.band, 4096);
  EXPECT_TRUE(p.staged) << "the lone CTA's 128 KiB tile";
}

// Staged tiles of 32-byte rows, forward and backward, widen to 64-byte rows (kColumnWideVectors)
// on the fewest CTAs whose bands fit kColumnSplitFromBytes, the target aside; past eight such
// bands, or under the column_wide_vectors=1 override, they keep their width.
TEST(SoftmaxColumnPlan, ThirtyTwoByteRowsWidenWhereABandFits) {
  for (const Case c : {Case{1000, 4, 1, 1, 4}, Case{1024, 2, 1, 1, 4}, Case{1025, 2, 1, 2, 4}, Case{2000, 4, 1, 2, 4},
                       Case{4096, 2, 1, 4, 4}, Case{8192, 4, 1, 8, 4}, Case{8193, 4, 1, 8, 2}, Case{3000, 8, 1, 4, 4},
                       Case{600, 4, 1, 1, 4}, Case{1000, 4, 2, 2, 4}, Case{4096, 2, 2, 8, 4}, Case{4097, 4, 2, 8, 2}}) {
    SCOPED_TRACE(testing::Message() << "K " << c.k << " elem " << c.elem << " inputs " << c.inputs);
    const SoftmaxColumnPlan p = plan_of({8, c.k, 4096}, c.elem, c.inputs);
    expect_case(p, c);
    if (c.vectors == kColumnWideVectors) EXPECT_LE(p.tile_bytes, kColumnSplitFromBytes);
  }
  // The override: 1 keeps the narrow plan, 8 widens to 128-byte rows, other values are refused.
  SoftmaxColumnOverrides o;
  SoftmaxColumnPlan p;
  o.wide_vectors = 1;
  ASSERT_TRUE(plan_softmax_columns({8, 2000, 4096}, 4, 1, 8, 8, kSmem, &p, o).is_ok());
  EXPECT_EQ(p.col_vectors, kColumnMinVectors);
  EXPECT_EQ(p.split, 1);
  o.wide_vectors = 8;
  ASSERT_TRUE(plan_softmax_columns({8, 1000, 4096}, 4, 1, 8, 8, kSmem, &p, o).is_ok());
  EXPECT_EQ(p.col_vectors, 8);
  EXPECT_EQ(p.split, 2);
  EXPECT_EQ(p.tile_bytes, 500u * 128);
  ASSERT_TRUE(plan_softmax_columns({8, 1000, 4096}, 4, 2, 8, 8, kSmem, &p, o).is_ok());
  EXPECT_EQ(p.col_vectors, 8) << "the override widens the backwards too";
  EXPECT_EQ(p.split, 4);
  for (int bad : {-1, 3, 2 * kColumnSoftmaxThreads}) {
    o.wide_vectors = bad;
    expect_refused(o, "wide_vectors:");
  }
}

// Batch invariance: the layout of a column's arithmetic (k_lanes) and the staging choice must not
// move with outer or inner.
TEST(SoftmaxColumnPlan, ColumnArithmeticDependsOnKAndDtypeOnly) {
  for (int64_t k : {1, 2, 7, 150, 1000, 1536, 1537, 1600, 1601, 3200, 3201, 4096, 5000, 12288, 12289}) {
    for (int elem : {2, 4, 8}) {
      for (int inputs : {1, 2}) {
        const SoftmaxColumnPlan ref = plan_of({1, k, 16384}, elem, inputs);
        for (ColumnExtents e : {ColumnExtents{64, k, 3}, ColumnExtents{7, k, 1001}, ColumnExtents{1, k, 2}}) {
          SoftmaxColumnPlan p;
          ASSERT_TRUE(plan_softmax_columns(e, elem, inputs, 8, 8, kSmem, &p).is_ok());
          EXPECT_EQ(p.k_lanes, ref.k_lanes) << "K=" << k << " elem=" << elem << " inputs=" << inputs;
          EXPECT_EQ(p.staged, ref.staged) << "K=" << k;
          EXPECT_EQ(p.split, ref.split) << "K=" << k;
          EXPECT_EQ(p.band, ref.band) << "K=" << k;
        }
        EXPECT_EQ(ref.k_lanes * ref.col_vectors, kColumnSoftmaxThreads);
        EXPECT_EQ(ref.k_lanes & (ref.k_lanes - 1), 0) << "the lane tree halves R";
      }
    }
  }
}

TEST(SoftmaxColumnPlan, LoneCtasStageUpTo4096RowsForwardAnd1600Backward) {
  EXPECT_TRUE(lone_plan_of({8, 4096, 4096}, 2, 1).staged);
  EXPECT_FALSE(lone_plan_of({8, 4097, 4096}, 2, 1).staged);
  EXPECT_TRUE(lone_plan_of({8, 1600, 4096}, 8, 2).staged);
  EXPECT_FALSE(lone_plan_of({8, 1601, 4096}, 8, 2).staged);
}

TEST(SoftmaxColumnPlan, SharedMemoryAccountsForTileStatisticsAndParameters) {
  for (int64_t k : {1, 19, 150, 1000, 3000, 5000, 20000}) {
    const SoftmaxColumnPlan p = plan_of({4, k, 4096}, 2, 1, 8, 8);
    const std::size_t tile = p.staged ? static_cast<std::size_t>(p.band) * p.col_vectors * 16 : 0;
    const std::size_t fixed = kColumnSoftmaxThreads * 8u * 8 + p.col_vectors * 8u * (p.split > 1 ? 16 : 8);
    EXPECT_EQ(p.tile_bytes, tile);
    EXPECT_EQ(p.buffers, p.staged && 2 * tile + fixed <= kSmem ? 2 : 1) << "K=" << k;
    EXPECT_EQ(p.smem_bytes, p.buffers * tile + fixed) << "K=" << k;
    EXPECT_LE(p.smem_bytes, kSmem);
  }
  // A device whose shared memory cannot hold the planned tile streams instead.
  const SoftmaxColumnPlan small = lone_plan_of({8, 3000, 4096}, 4, 1, kColumnMinVectors, 0, 64 * 1024);
  EXPECT_FALSE(small.staged);
  EXPECT_LE(small.smem_bytes, 64u * 1024);
}

// The narrowest staged tile is an override (column_min_vectors): at 1, a lone CTA with a K of 6000
// (64x6000x256) stages a one-vector tile of 94 KiB instead of reading x twice; the default keeps 2
// vectors (a whole sector a row) and reads such columns twice. The override must be a power of two.
TEST(SoftmaxColumnPlan, NarrowestStagedTileIsAnOverride) {
  for (int elem : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "elem " << elem);
    const SoftmaxColumnPlan d = lone_plan_of({64, 6000, 256}, elem, 1);
    EXPECT_FALSE(d.staged);
    EXPECT_EQ(d.col_vectors, kColumnStreamVectors);
    const SoftmaxColumnPlan one = lone_plan_of({64, 6000, 256}, elem, 1, 1);
    EXPECT_TRUE(one.staged);
    EXPECT_EQ(one.col_vectors, 1);
    EXPECT_EQ(one.k_lanes, kColumnSoftmaxThreads);
    EXPECT_EQ(one.tile_bytes, 6000u * 16);
    EXPECT_EQ(one.tiles, 64 * 256 / (16 / elem));
    const SoftmaxColumnPlan long_k = lone_plan_of({8, 9000, 256}, elem, 1, 1);
    EXPECT_FALSE(long_k.staged) << "past 128 KiB even one vector wide";
    EXPECT_EQ(long_k.col_vectors, kColumnStreamVectors);
  }
  SoftmaxColumnOverrides o;
  for (int bad : {0, 3, 2 * kColumnSoftmaxThreads}) {
    o.min_vectors = bad;
    expect_refused(o, "min_vectors:");
  }
}

// The target is an override (column_stage_target_bytes): at 24 KiB the 16-bit 32x19x128x128
// tile halves (64 vectors wide, 4 lanes down K: twice the tiles) and a K of 4096 splits in eight;
// a target past kColumnStageMaxBytes or under 1 KiB is refused.
TEST(SoftmaxColumnPlan, TargetIsAnOverride) {
  SoftmaxColumnOverrides o;
  o.target_bytes = 24 * 1024;
  o.wide_vectors = 1;  // the narrow plans: the 64-byte rows' bands are not the target's
  SoftmaxColumnPlan p;
  ASSERT_TRUE(plan_softmax_columns({32, 19, 16384}, 2, 1, 8, 8, kSmem, &p, o).is_ok());
  EXPECT_EQ(p.col_vectors, 64);
  EXPECT_EQ(p.k_lanes, 4);
  EXPECT_EQ(p.tiles, 2 * plan_of({32, 19, 16384}, 2, 1).tiles);
  ASSERT_TRUE(plan_softmax_columns({64, 4096, 256}, 2, 1, 8, 8, kSmem, &p, o).is_ok());
  EXPECT_EQ(p.split, 8);
  EXPECT_EQ(p.band, 512);
  EXPECT_EQ(p.tile_bytes, 512u * 32);
  for (std::size_t bad : {std::size_t(0), std::size_t(1023), kColumnStageMaxBytes + 1}) {
    o.target_bytes = bad;
    expect_refused(o, "target_bytes:");
  }
}

// The largest lone staged tile: by default 128 KiB for one input (a K of 4096 stages its
// two-vector tile, one CTA an SM) and 100 KiB for two (a backward K of 2048 reads twice); the
// override (column_stage_max_bytes) sets both, at the two-read plan's width. A device that cannot
// hold the tile streams.
TEST(SoftmaxColumnPlan, LargestStagedTileIsAnOverride) {
  constexpr std::size_t kSmall = 100 * 1024, kBig = 200 * 1024;
  for (int elem : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "elem " << elem);
    const SoftmaxColumnPlan d = lone_plan_of({64, 4096, 256}, elem, 1);
    ASSERT_TRUE(d.staged);
    EXPECT_EQ(d.tile_bytes, 4096u * 32);
    EXPECT_EQ(d.buffers, 1);
    EXPECT_LE(d.smem_bytes, kSmem);
    const SoftmaxColumnPlan small = lone_plan_of({64, 4096, 256}, elem, 1, kColumnMinVectors, kSmall);
    EXPECT_FALSE(small.staged) << "the override at 100 KiB";
    EXPECT_EQ(small.col_vectors, d.col_vectors);
    EXPECT_EQ(small.k_lanes, d.k_lanes);
    EXPECT_EQ(small.tiles, d.tiles);
    const SoftmaxColumnPlan big = lone_plan_of({64, 6000, 256}, elem, 1, kColumnMinVectors, kBig);
    EXPECT_TRUE(big.staged) << "the override at 200 KiB: 6000 x 32 B";
    EXPECT_FALSE(lone_plan_of({64, 6000, 256}, elem, 1).staged);
    EXPECT_FALSE(lone_plan_of({64, 2048, 256}, elem, 2).staged) << "two inputs: 128 KiB";
    EXPECT_TRUE(lone_plan_of({64, 1600, 256}, elem, 2).staged);
    const SoftmaxColumnPlan backward = lone_plan_of({64, 2048, 256}, elem, 2, kColumnMinVectors, kBig);
    EXPECT_TRUE(backward.staged) << "the override sets two inputs' too";
    const SoftmaxColumnPlan device = lone_plan_of({64, 4096, 256}, elem, 1, kColumnMinVectors, 0, 100 * 1024);
    EXPECT_FALSE(device.staged) << "100 KiB of shared memory";
    EXPECT_EQ(device.col_vectors, d.col_vectors);
  }
}

TEST(SoftmaxColumnPlan, TilesCoverTheInnerExtent) {
  for (int64_t inner : {2, 3, 8, 64, 1001, 16384}) {
    const SoftmaxColumnPlan p = plan_of({3, 150, inner}, 4, 1);
    EXPECT_GE(p.tiles_per_slab * p.width, inner);
    EXPECT_LT((p.tiles_per_slab - 1) * p.width, inner);
    EXPECT_EQ(p.tiles, 3 * p.tiles_per_slab);
  }
}

// ---- randomized properties -------------------------------------------------------------------

// Random extents as dense tensors give them (dense_column_extents): up to 2^62 elements, outer
// and inner past 2^31; or, one case in eight, extents only the plan's own API takes, up to
// int64's maxima each.
ColumnExtents random_extents(std::mt19937_64& rng) {
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const auto log_uniform = [&](int max_bits) {
    const int bits = static_cast<int>(uniform(0, max_bits));
    return bits == 0 ? int64_t(1) : uniform(int64_t(1) << (bits - 1), (int64_t(1) << bits) - 1) + 1;
  };
  if (uniform(0, 7) == 0) {
    const int64_t top[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 1,
                           int64_t(1) << 62, int64_t(3) << 61, log_uniform(62)};
    return {uniform(0, 1) ? top[uniform(0, 4)] : 1, uniform(0, 1) ? top[uniform(0, 4)] : 1,
            std::max<int64_t>(2, top[uniform(0, 4)])};
  }
  std::vector<int64_t> sizes;
  int budget = 62;
  for (int d = static_cast<int>(uniform(2, 5)); d > 0; --d) {
    const int bits = static_cast<int>(uniform(0, std::min(budget, 34)));
    sizes.push_back(bits == 0 ? 1 : uniform(int64_t(1) << (bits - 1), (int64_t(1) << bits) - 1) + 1);
    budget -= bits;
  }
  sizes.back() = std::max<int64_t>(sizes.back(), 2);  // a dim after the reduced one: inner >= 2
  ColumnExtents e;
  const TensorView v = dense(sizes);
  EXPECT_TRUE(dense_column_extents(v, static_cast<int>(uniform(0, v.rank - 2)), &e));
  return e;
}

// Every plan of random extents, dtype, op and device is one softmax_column_kernel runs as laid
// out: the tiles cover the inner extent once, the CTA count is exact, the lane tree is whole, the
// shared memory holds the tile, statistics and parameters within the device's, staged tiles fit
// the kernel's int K; and the column arithmetic (W, R, staged) is the same for any outer and inner.
TEST(SoftmaxColumnPlanRandom, EveryPlanTilesTheKernelsLayout) {
  std::mt19937_64 rng(86);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int staged = 0, streamed = 0, rejected = 0, doubled = 0, split = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const ColumnExtents e = random_extents(rng);
    const int elem = static_cast<int>(2 << uniform(0, 2));
    const int inputs = static_cast<int>(uniform(1, 2));
    const int acc = elem == 8 ? 8 : 4;  // the ops' statistics and parameters: one or two accumulators
    const int stat_bytes = static_cast<int>(acc * uniform(1, 2)), param_bytes = static_cast<int>(acc * uniform(1, 2));
    // smem_optin of an H200, an A100, an sm_89, the 48 KiB every device has, or between.
    const std::size_t smem_kb[] = {227, 163, 99, 48, static_cast<std::size_t>(uniform(48, 227))};
    const std::size_t smem = smem_kb[uniform(0, 4)] * 1024;
    // The overrides now and then: column_min_vectors, column_stage_target_bytes,
    // column_stage_max_bytes, column_max_split.
    SoftmaxColumnOverrides o;
    if (uniform(0, 3) == 0) o.min_vectors = 1 << uniform(0, 8);
    if (uniform(0, 3) == 0) o.target_bytes = static_cast<std::size_t>(uniform(1024, kColumnStageMaxBytes));
    if (uniform(0, 3) == 0) o.stage_max_bytes = static_cast<std::size_t>(uniform(1, 256 * 1024));
    if (uniform(0, 3) == 0) o.max_split = 1 << uniform(0, 3);
    if (uniform(0, 3) == 0) o.wide_vectors = 1 << uniform(0, 8);
    const int min_vectors = o.min_vectors, max_split = o.max_split;
    const int wide = o.wide_vectors != 0 ? o.wide_vectors : kColumnWideVectors;
    const std::size_t stage_max = o.stage_max_bytes;
    SCOPED_TRACE(testing::Message() << "extents [" << e.outer << ", " << e.reduced << ", " << e.inner << "] elem="
                                    << elem << " inputs=" << inputs << " smem=" << smem << " min_vectors="
                                    << min_vectors << " target=" << o.target_bytes << " stage_max=" << stage_max
                                    << " max_split=" << max_split << " wide=" << wide);
    SoftmaxColumnPlan p;
    const Status s = plan_softmax_columns(e, elem, inputs, stat_bytes, param_bytes, smem, &p, o);
    const __int128 slabs = __int128(e.outer) * e.reduced;  // < 2^126: each factor below 2^63
    if (slabs > std::numeric_limits<int64_t>::max() || slabs * e.inner > std::numeric_limits<int64_t>::max()) {
      // No dense tensor has these extents.
      ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
      ASSERT_EQ(s.message().rfind("x:", 0), 0u) << s.message();
      ++rejected;
      continue;
    }
    ASSERT_TRUE(s.is_ok()) << s.message();
    const int vec = 16 / elem;
    ASSERT_EQ(p.vec, vec);
    // meet_lanes: W lanes across, R = 256 / W down, halved to 1 in a tree.
    ASSERT_TRUE(p.col_vectors >= 1 && (p.col_vectors & (p.col_vectors - 1)) == 0);
    ASSERT_EQ(p.col_vectors * p.k_lanes, kColumnSoftmaxThreads);
    ASSERT_EQ(p.width, int64_t(p.col_vectors) * vec);
    // Tiles cover the inner extent, none wholly past it, and the kernel's items are exact.
    ASSERT_GE(__int128(p.tiles_per_slab) * p.width, e.inner);
    ASSERT_LT(__int128(p.tiles_per_slab - 1) * p.width, e.inner);
    ASSERT_TRUE(__int128(p.tiles) == __int128(e.outer) * p.tiles_per_slab);
    ASSERT_TRUE(p.buffers == 1 || (p.buffers == 2 && p.staged));
    // Split tiles: a power of two of CTAs up to the cap, bands covering K, none empty.
    ASSERT_TRUE(p.split >= 1 && p.split <= max_split && (p.split & (p.split - 1)) == 0);
    ASSERT_TRUE(p.split == 1 || p.staged);
    // (The narrowest lone tile passes kColumnSplitFromBytes, or the widened one does.)
    ASSERT_TRUE(p.split == 1 || __int128(e.reduced) * p.col_vectors * 16 * inputs > kColumnSplitFromBytes);
    ASSERT_EQ(p.band, (e.reduced - 1) / p.split + 1);
    ASSERT_GT(e.reduced, (p.split - 1) * p.band) << "the last CTA's band is empty";
    // Dynamic shared memory: [buffers][tile], the statistics [V][256 threads], the parameters [W * V]
    // (and a split tile's merged statistics [W * V]).
    const std::size_t stats = std::size_t(kColumnSoftmaxThreads) * vec * stat_bytes;
    const std::size_t params = std::size_t(p.col_vectors) * vec * (param_bytes + (p.split > 1 ? stat_bytes : 0));
    ASSERT_GE(p.smem_bytes, p.buffers * p.tile_bytes + stats + params);
    ASSERT_LE(p.smem_bytes, smem);
    if (p.staged) {
      ++staged;
      doubled += p.buffers == 2;
      ASSERT_GE(p.col_vectors, min_vectors);
      split += p.split > 1;
      // stage_tile: a band of W vectors an input, indexed as int.
      ASSERT_EQ(p.tile_bytes, std::size_t(p.band) * p.col_vectors * 16 * inputs);
      ASSERT_LE(p.band * p.col_vectors * vec * inputs, int64_t(INT32_MAX));
      // Within the target, or the narrowest lone tile within the largest staged one.
      const std::size_t largest = stage_max != 0 ? stage_max
                                  : inputs == 1   ? kColumnStageMaxBytes
                                                  : kColumnStageMaxBytesTwoInputs;
      // Within the target, the narrowest lone tile within the largest staged one, or widened
      // rows within kColumnSplitFromBytes.
      ASSERT_TRUE(p.tile_bytes <= o.target_bytes ||
                  (p.split == 1 && p.col_vectors == min_vectors && p.tile_bytes <= largest) ||
                  (p.col_vectors == wide && p.tile_bytes <= kColumnSplitFromBytes))
          << p.tile_bytes << " bytes, " << p.col_vectors << " vectors wide";
      // Narrower than `wide` only where no cluster's bands of wide rows fit.
      for (int s = 1; p.col_vectors < wide && s <= max_split; s *= 2) {
        const int64_t band = (e.reduced - 1) / s + 1;
        if (s > 1 && (s - 1) * band >= e.reduced) break;
        ASSERT_GT(__int128(band) * wide * 16 * inputs, kColumnSplitFromBytes) << "split " << s;
      }
    } else {
      ++streamed;
      ASSERT_EQ(p.tile_bytes, 0u);
      ASSERT_EQ(p.col_vectors, kColumnStreamVectors);
    }
    // Batch invariance: another outer and inner of the same K give the same column arithmetic.
    const ColumnExtents other{uniform(1, 1 << 20), e.reduced, uniform(2, 1 << 20)};
    if (__int128(other.outer) * other.reduced * other.inner > std::numeric_limits<int64_t>::max()) continue;
    SoftmaxColumnPlan q;
    ASSERT_TRUE(plan_softmax_columns(other, elem, inputs, stat_bytes, param_bytes, smem, &q, o).is_ok());
    ASSERT_EQ(q.col_vectors, p.col_vectors);
    ASSERT_EQ(q.k_lanes, p.k_lanes);
    ASSERT_EQ(q.staged, p.staged);
    ASSERT_EQ(q.split, p.split);
    ASSERT_EQ(q.band, p.band);
  }
  // The generator must reach every path, or this test proves little.
  EXPECT_GT(staged, 1000);
  EXPECT_GT(doubled, 200);
  EXPECT_GT(split, 200);
  EXPECT_GT(streamed, 1000);
  EXPECT_GT(rejected, 200);
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
  s = plan_softmax_columns({1, 4, 4}, 4, 1, 0, 8, kSmem, &p);
  EXPECT_EQ(s.message().rfind("stat_bytes:", 0), 0u) << s.message();
  s = plan_softmax_columns({1, 4, 4}, 4, 1, 8, 0, kSmem, &p);
  EXPECT_EQ(s.message().rfind("param_bytes:", 0), 0u) << s.message();
  EXPECT_EQ(plan_softmax_columns({1, 4, 4}, 4, 1, 8, 8, kSmem, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reducekit
