// Host tests for plan_fused_norm_backward: fused layouts cover their rows with instantiated tile
// shapes inside the register budget, and the cutoffs to the two-kernel path sit where the
// header says.
#include <gtest/gtest.h>

#include "ops/norm_backward_plan.hpp"

namespace reducekit {
namespace {

TEST(NormBackwardPlan, FusedLayoutsCoverTheirRows) {
  const int64_t lengths[] = {1,    31,   127,  128,  255,  256,  257,  511,   512,   513,   781,   1000,  1023,
                             1024, 2045, 2048, 4096, 4099, 8192, 8193, 12800, 16384, 32768, 40009, 65536, 65537,
                             100003, 131072, 262144, 1 << 20};
  for (int elem : {2, 4, 8}) {
    for (int64_t n : lengths) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem);
      const FusedNormBackwardLayout l = plan_fused_norm_backward(n, elem, fused_max_vpt(elem));
      if (!l.fused) continue;
      EXPECT_EQ(l.vec, 16 / elem);
      EXPECT_GE(l.capacity(), n);
      EXPECT_TRUE(l.vpt == 1 || l.vpt == 2 || l.vpt == 4) << l.vpt;
      EXPECT_LE(l.vpt * l.vec * (elem == 8 ? 2 : 1), kFusedTileWords) << "tile over the register budget";
      EXPECT_EQ(l.threads % 32, 0);
      EXPECT_GE(l.threads, 32);
      EXPECT_LE(l.threads, kFusedMaxThreads);
      EXPECT_GE(l.cluster, 1);
      EXPECT_LE(l.cluster, kFusedMaxCluster);
      // Every CTA of a cluster holds columns (rank r's first vector is r * threads).
      EXPECT_GT(n, (l.cluster - 1) * int64_t(l.threads) * l.vec);
    }
  }
}

TEST(NormBackwardPlan, Cutoffs) {
  auto fused = [](int64_t n, int elem) { return plan_fused_norm_backward(n, elem, fused_max_vpt(elem)).fused; };
  // Short rows (fewer than 128 vectors) stay with the row engine's warp rows.
  EXPECT_FALSE(fused(508, 4));
  EXPECT_TRUE(fused(509, 4));
  EXPECT_FALSE(fused(1016, 2));
  EXPECT_TRUE(fused(1017, 2));
  EXPECT_FALSE(fused(254, 8));
  EXPECT_TRUE(fused(255, 8));
  // Long rows: up to 8 CTAs of 512 threads x 16 accumulation words.
  EXPECT_TRUE(fused(65536, 4));
  EXPECT_FALSE(fused(65537, 4));
  EXPECT_TRUE(fused(65536, 2));
  EXPECT_FALSE(fused(65537, 2));
  EXPECT_TRUE(fused(32768, 8));
  EXPECT_FALSE(fused(32769, 8));
  EXPECT_FALSE(fused(262144, 4));
}

TEST(NormBackwardPlan, BenchmarkShapes) {
  // float32 4096: 512 threads x 2 vectors; 8192: 512 x 4; 12800: two CTAs of 416 x 4.
  FusedNormBackwardLayout l = plan_fused_norm_backward(4096, 4, 4);
  EXPECT_EQ(l.threads, 512);
  EXPECT_EQ(l.vpt, 2);
  EXPECT_EQ(l.cluster, 1);
  l = plan_fused_norm_backward(8192, 4, 4);
  EXPECT_EQ(l.threads, 512);
  EXPECT_EQ(l.vpt, 4);
  EXPECT_EQ(l.cluster, 1);
  l = plan_fused_norm_backward(12800, 4, 4);
  EXPECT_EQ(l.threads, 416);
  EXPECT_EQ(l.vpt, 4);
  EXPECT_EQ(l.cluster, 2);
  // bfloat16 8192: 512 threads x 2 vectors of 8; 32768: 4 CTAs.
  l = plan_fused_norm_backward(8192, 2, 2);
  EXPECT_EQ(l.threads, 512);
  EXPECT_EQ(l.vpt, 2);
  EXPECT_EQ(l.cluster, 1);
  EXPECT_EQ(plan_fused_norm_backward(32768, 2, 2).cluster, 4);
  // A smaller tile cap (tuning) moves float32 8192 to two CTAs of 512 x 2.
  l = plan_fused_norm_backward(8192, 4, 2);
  EXPECT_EQ(l.vpt, 2);
  EXPECT_EQ(l.cluster, 2);
  EXPECT_EQ(l.threads, 512);
  EXPECT_EQ(plan_fused_norm_backward(8192, 4, 3).vpt, 2) << "caps round down to a power of two";
}

}  // namespace
}  // namespace reducekit
