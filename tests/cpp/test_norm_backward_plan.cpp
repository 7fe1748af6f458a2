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
  // Short rows (fewer than 128 vectors) stay with the row engine's warp rows; long rows fuse up to
  // 8 CTAs of 512 threads x 16 accumulation words.
  struct Case {
    int64_t n;
    int elem;
    bool fused;
  };
  const Case cases[] = {{508, 4, false},   {509, 4, true},   {1016, 2, false},  {1017, 2, true},
                        {254, 8, false},   {255, 8, true},   {65536, 4, true},  {65537, 4, false},
                        {65536, 2, true},  {65537, 2, false}, {32768, 8, true}, {32769, 8, false},
                        {262144, 4, false}};
  for (const Case& c : cases) {
    EXPECT_EQ(plan_fused_norm_backward(c.n, c.elem, fused_max_vpt(c.elem)).fused, c.fused)
        << "n=" << c.n << " elem=" << c.elem;
  }
}

TEST(NormBackwardPlan, BenchmarkShapes) {
  struct Case {
    int64_t n;
    int elem, max_vpt;
    int threads, vpt, cluster;
    const char* why;
  };
  const Case cases[] = {
      {4096, 4, 4, 512, 2, 1, "float32 4096: 512 threads x 2 vectors"},
      {8192, 4, 4, 512, 4, 1, "float32 8192: 512 x 4"},
      {12800, 4, 4, 416, 4, 2, "float32 12800: two CTAs of 416 x 4"},
      {8192, 2, 2, 512, 2, 1, "bfloat16 8192: 512 threads x 2 vectors of 8"},
      {32768, 2, 2, 512, 2, 4, "bfloat16 32768: 4 CTAs"},
      {8192, 4, 2, 512, 2, 2, "a smaller tile cap (tuning) moves float32 8192 to two CTAs of 512 x 2"},
      {8192, 4, 3, 512, 2, 2, "caps round down to a power of two"},
      {2045, 8, 1, 512, 1, 2, "a tile cap that forces a cluster counts 512-thread CTAs (was 2 x 256, too few)"},
  };
  for (const Case& c : cases) {
    const FusedNormBackwardLayout l = plan_fused_norm_backward(c.n, c.elem, c.max_vpt);
    EXPECT_EQ(l.threads, c.threads) << c.why;
    EXPECT_EQ(l.vpt, c.vpt) << c.why;
    EXPECT_EQ(l.cluster, c.cluster) << c.why;
  }
}

}  // namespace
}  // namespace reducekit
