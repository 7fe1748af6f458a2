// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_fused_norm_backward: fused layouts cover their rows with instantiated tile
// shapes inside the register budget, short rows share CTAs (row lanes) in the shapes the
// kernels exist for, and the cutoffs to the two-kernel path sit where the header says.
#include <gtest/gtest.h>

#include <type_traits>

#include "plan/norm_backward_plan.hpp"

namespace reducekit {
namespace {

// The layout is a function of (row length, element size, tile cap) alone: no row count can
// enter it, so dx is batch-invariant by construction.
static_assert(std::is_same_v<decltype(&plan_fused_norm_backward), FusedNormBackwardLayout (*)(int64_t, int, int)>,
              "the fused backward layout must not depend on the row count");

bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

// The invariants every fused layout must meet.
void check_layout(const FusedNormBackwardLayout& l, int64_t n, int elem) {
  EXPECT_EQ(l.vec, 16 / elem);
  EXPECT_GE(l.capacity(), n);
  EXPECT_TRUE(l.vpt == 1 || l.vpt == 2 || l.vpt == 4) << l.vpt;
  EXPECT_LE(l.vpt * l.vec * (elem == 8 ? 2 : 1), kFusedTileWords) << "tile over the register budget";
  EXPECT_EQ(l.threads, l.rows_per_cta * l.row_threads);
  EXPECT_EQ(l.threads % 32, 0);
  EXPECT_GE(l.threads, 32);
  EXPECT_LE(l.threads, kFusedMaxThreads);
  EXPECT_GE(l.rows_per_cta, 1);
  if (l.rows_per_cta > 1) {
    // Row lanes: kernels exist for S = 4, 8, 16 (part of a warp) and 32, 64, .. 256, at one tile.
    EXPECT_TRUE(is_pow2(l.row_threads)) << l.row_threads;
    EXPECT_GE(l.row_threads, kFusedMinRowThreads);
    EXPECT_LE(l.row_threads, kFusedMaxRowThreads);
    EXPECT_EQ(l.vpt, fused_row_lane_vpt(elem));
    EXPECT_LE(l.threads * l.vpt, kFusedRowLaneVectors) << "ring over 64 KB";
    // The fewest lanes that hold the row: half as many would not.
    if (l.row_threads > kFusedMinRowThreads) EXPECT_LT(int64_t(l.row_threads / 2) * l.vpt * l.vec, n);
  } else {
    EXPECT_EQ(l.row_threads, l.threads);
    // No whole warp holds only padding.
    EXPECT_GT(n, int64_t(l.threads - 32) * l.vpt * l.vec);
  }
}

// Every row length from 1 to 2^18: fused up to the dtype's longest fused row with no gap, every
// layout valid, and row lanes exactly for the rows that need at most 256 threads at 8 values a
// thread (128 for float64).
TEST(NormBackwardPlan, EveryRowLengthTo2Pow18) {
  for (int elem : {2, 4, 8}) {
    const int64_t longest_fused = elem == 8 ? 4096 : 8192;  // 512 threads x 16 accumulation words
    const int64_t longest_lanes = elem == 8 ? 1024 : 2048;
    int64_t failures = 0;
    for (int64_t n = 1; n <= (int64_t(1) << 18) && failures < 5; ++n) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem);
      const FusedNormBackwardLayout l = plan_fused_norm_backward(n, elem, fused_max_vpt(elem));
      EXPECT_EQ(l.fused, n <= longest_fused);
      if (l.fused) {
        EXPECT_EQ(l.rows_per_cta > 1, n <= longest_lanes);
        check_layout(l, n, elem);
      }
      failures += ::testing::Test::HasFailure() ? 1 : 0;
    }
  }
}

TEST(NormBackwardPlan, FusedLayoutsCoverTheirRows) {
  const int64_t lengths[] = {1,    31,   127,  128,  255,  256,  257,  511,   512,   513,   781,   1000,  1023,
                             1024, 2045, 2048, 4096, 4099, 8192, 8193, 12800, 16384, 32768, 40009, 65536, 65537,
                             100003, 131072, 262144, 1 << 20};
  for (int elem : {2, 4, 8}) {
    for (int max_vpt : {1, 2, 4}) {
      for (int64_t n : lengths) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " max_vpt=" << max_vpt);
        const FusedNormBackwardLayout l = plan_fused_norm_backward(n, elem, max_vpt);
        if (l.fused) check_layout(l, n, elem);
      }
    }
  }
}

TEST(NormBackwardPlan, Cutoffs) {
  // Short rows share CTAs (row lanes) up to 256 threads a row (float64: 128); longer rows take a
  // CTA each, up to 512 threads x 16 accumulation words; no clusters.
  struct Case {
    int64_t n;
    int elem;
    bool fused;
    int rows_per_cta;
  };
  const Case cases[] = {{1, 2, true, 128},      {1, 4, true, 128},       {1, 8, true, 64},
                        {2048, 2, true, 2},     {2049, 2, true, 1},      {2048, 4, true, 2},
                        {2049, 4, true, 1},     {1024, 8, true, 2},      {1025, 8, true, 1},
                        {8192, 4, true, 1},     {8193, 4, false, 1},     {8192, 2, true, 1},
                        {8193, 2, false, 1},    {4096, 8, true, 1},      {4097, 8, false, 1},
                        {12800, 4, false, 1},   {32768, 2, false, 1},    {262144, 4, false, 1}};
  for (const Case& c : cases) {
    const FusedNormBackwardLayout l = plan_fused_norm_backward(c.n, c.elem, fused_max_vpt(c.elem));
    EXPECT_EQ(l.fused, c.fused) << "n=" << c.n << " elem=" << c.elem;
    EXPECT_EQ(l.rows_per_cta, c.rows_per_cta) << "n=" << c.n << " elem=" << c.elem;
  }
}

TEST(NormBackwardPlan, BenchmarkShapes) {
  struct Case {
    int64_t n;
    int elem, max_vpt;
    int threads, vpt, rows_per_cta, row_threads;
    const char* why;
  };
  const Case cases[] = {
      {128, 2, 2, 512, 1, 32, 16, "bfloat16 128: 32 rows of 16 lanes x 8 values"},
      {512, 2, 2, 512, 1, 8, 64, "bfloat16 512: 8 rows of 2 warps"},
      {1024, 2, 2, 512, 1, 4, 128, "bfloat16 1024: 4 rows of 128 threads (one-row CTAs were 128 threads)"},
      {2048, 2, 2, 512, 1, 2, 256, "bfloat16 2048: 2 rows of 256 threads"},
      {128, 4, 4, 512, 2, 32, 16, "float32 128: 32 rows of 16 lanes x 2 vectors"},
      {512, 4, 4, 512, 2, 8, 64, "float32 512: 8 rows of 64 x 2 vectors"},
      {1024, 4, 4, 512, 2, 4, 128, "float32 1024: 4 rows of 128 x 2"},
      {2048, 4, 4, 512, 2, 2, 256, "float32 2048: 2 rows of 256 x 2"},
      {1024, 4, 1, 512, 2, 4, 128, "the tile cap (tuning) leaves row lanes alone"},
      {100, 8, 4, 256, 4, 16, 16, "float64 100: 256-thread CTAs (4-vector tiles), 16 rows of 16"},
      {33, 2, 2, 512, 1, 64, 8, "bfloat16 33: 5 vectors on 8 lanes"},
      {4096, 4, 4, 512, 2, 1, 512, "float32 4096: 512 threads x 2 vectors"},
      {8192, 4, 4, 512, 4, 1, 512, "float32 8192: 512 x 4"},
      {8192, 2, 2, 512, 2, 1, 512, "bfloat16 8192: 512 threads x 2 vectors of 8"},
      {6000, 4, 4, 384, 4, 1, 384, "float32 6000: 1500 vectors on 384 threads x 4 (warps of padding trimmed)"},
      {4096, 4, 3, 512, 2, 1, 512, "caps round down to a power of two"},
  };
  for (const Case& c : cases) {
    const FusedNormBackwardLayout l = plan_fused_norm_backward(c.n, c.elem, c.max_vpt);
    EXPECT_TRUE(l.fused) << c.why;
    EXPECT_EQ(l.threads, c.threads) << c.why;
    EXPECT_EQ(l.vpt, c.vpt) << c.why;
    EXPECT_EQ(l.rows_per_cta, c.rows_per_cta) << c.why;
    EXPECT_EQ(l.row_threads, c.row_threads) << c.why;
  }
}

// A tile cap (tuning) that cannot hold the row in one CTA sends it to the two-kernel path.
TEST(NormBackwardPlan, TileCapBelowTheRowIsNotFused) {
  EXPECT_TRUE(plan_fused_norm_backward(8192, 4, 4).fused);
  EXPECT_FALSE(plan_fused_norm_backward(8192, 4, 3).fused);  // rounds down to 2: 4 vectors a thread needed
  EXPECT_FALSE(plan_fused_norm_backward(2045, 8, 1).fused);
}

// One-row layouts hold at least fused_one_row_min_vpt vectors a thread, whatever the tile cap:
// the fused kernels of fewer (float32 and float64 one-vector tiles) are not built.
TEST(NormBackwardPlan, OneRowLayoutsHoldAtLeastTheLeastBuiltTile) {
  EXPECT_EQ(fused_one_row_min_vpt(2), 1);
  EXPECT_EQ(fused_one_row_min_vpt(4), 2);
  EXPECT_EQ(fused_one_row_min_vpt(8), 2);
  for (int elem : {2, 4, 8}) {
    for (int max_vpt = 1; max_vpt <= fused_max_vpt(elem); ++max_vpt) {
      for (int64_t n = 1; n <= 20000; ++n) {
        const FusedNormBackwardLayout l = plan_fused_norm_backward(n, elem, max_vpt);
        if (!l.fused || l.rows_per_cta > 1) continue;
        ASSERT_GE(l.vpt, fused_one_row_min_vpt(elem)) << "n=" << n << " elem=" << elem << " max_vpt=" << max_vpt;
      }
    }
  }
}

}  // namespace
}  // namespace reducekit
