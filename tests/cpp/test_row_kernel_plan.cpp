// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_row_kernel: every row length gets a configuration that covers it with
// instantiated kernel shapes and fits the device limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "plan/norm_backward_plan.hpp"
#include "plan/row_kernel_plan.hpp"

namespace reducekit {
namespace {

// Two plans lay a row onto threads the same way (every field but the split plan).
void expect_same_layout(const RowKernelConfig& a, const RowKernelConfig& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.vpt, b.vpt);
  EXPECT_EQ(a.lanes, b.lanes);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.cluster, b.cluster);
  EXPECT_EQ(a.tiles, b.tiles);
  EXPECT_EQ(a.stash_tiles, b.stash_tiles);
  EXPECT_EQ(a.ring, b.ring);
  EXPECT_EQ(a.smem_bytes, b.smem_bytes);
}

std::vector<int64_t> row_lengths() {
  std::vector<int64_t> n = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
                            257, 511, 512, 513, 781, 1000, 1023, 1024, 1025, 2045, 2048, 4099, 8192, 12800,
                            32767, 32768, 32769, 40009, 65536, 100003, 262144, 1 << 20, 3 << 20, 10000000};
  return n;
}

TEST(RowKernelPlan, CoversEveryRowWithInstantiatedShapes) {
  const RowKernelLimits limits;
  for (int elem : {2, 4, 8}) {
    {
      for (int inputs : {1, 2}) {
        for (int64_t n : row_lengths()) {
          SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " inputs=" << inputs);
          const RowKernelConfig c = plan_row_kernel(n, elem, inputs, limits);
          EXPECT_GE(c.capacity(), n);
          EXPECT_EQ(c.vec, 16 / elem);
          EXPECT_TRUE(c.vpt == 1 || c.vpt == 2 || c.vpt == 4 || c.vpt == 8 || c.vpt == 16) << c.vpt;
          const int acc_words = elem == 8 ? 2 : 1;
          EXPECT_LE(c.vpt * c.vec * acc_words * inputs, 64) << "register tile over 64 words per thread";
          if (c.kind == RowKernelKind::kWarp) {
            EXPECT_EQ(c.threads, 128);
            EXPECT_TRUE(c.lanes == 4 || c.lanes == 8 || c.lanes == 16 || c.lanes == 32);
            EXPECT_LE(c.vpt, 4);
            EXPECT_LE(c.vpt * c.vec * inputs, 16) << "warp rows hold at most 16 elements a lane";
            EXPECT_TRUE(c.vpt == 1 || c.lanes == 32) << "multi-slot warp kernels exist for 32 lanes only";
          } else {
            EXPECT_GE(c.threads, 32);
            EXPECT_LE(c.threads, 512);
            EXPECT_EQ(c.threads % 32, 0);
            if (c.cluster == 1) {
              EXPECT_LT(int64_t(c.threads - 32) * c.vpt * c.vec, n) << "a whole warp would hold only padding";
            }
            EXPECT_GE(c.cluster, 1);
            EXPECT_LE(c.cluster, limits.max_cluster);
            EXPECT_GE(c.tiles, 1);
            EXPECT_LE(c.stash_tiles, c.tiles - 1);
            EXPECT_LE(c.smem_bytes, limits.max_smem_per_block);
            if (c.tiles > 1) {
              EXPECT_GE(c.cluster, 8) << "tiles only once a portable cluster is full";
              EXPECT_EQ(c.vpt * c.vec * acc_words * inputs, 64) << "held rows stream the largest tile only (re-read tiles: RereadRows*)";
            } else {
              EXPECT_EQ(c.stash_tiles, 0);
            }
          }
        }
      }
    }
  }
}

TEST(RowKernelPlan, ShortRowsShareWarpsLongRowsUseClusters) {
  const RowKernelLimits limits;
  EXPECT_EQ(plan_row_kernel(128, 4, 1, limits).kind, RowKernelKind::kWarp);
  EXPECT_EQ(plan_row_kernel(64, 4, 1, limits).lanes, 16);
  const RowKernelConfig medium = plan_row_kernel(4096, 4, 1, limits);
  EXPECT_EQ(medium.kind, RowKernelKind::kBlock);
  EXPECT_EQ(medium.cluster, 1);
  EXPECT_EQ(medium.tiles, 1);
  const RowKernelConfig long_row = plan_row_kernel(262144, 4, 1, limits);
  EXPECT_GT(long_row.cluster, 1);
  EXPECT_EQ(long_row.tiles, 1) << "a 1 MB row is read once into the cluster's registers";
  const RowKernelConfig huge = plan_row_kernel(1 << 20, 4, 1, limits);
  EXPECT_GT(huge.tiles, 1);
  EXPECT_GT(huge.stash_tiles, 0);
}

TEST(RowKernelPlan, MediumRowsSpreadThirtyTwoValuesAThreadFrom64To512Threads) {
  const RowKernelLimits limits;
  const RowKernelConfig bf16_4k = plan_row_kernel(4096, 2, 1, limits);
  EXPECT_EQ(bf16_4k.threads, 128);
  EXPECT_EQ(bf16_4k.vpt, 4);
  const RowKernelConfig bf16_4k_backward = plan_row_kernel(4096, 2, 2, limits);
  EXPECT_EQ(bf16_4k_backward.threads, 256) << "two inputs: the same 32 values a thread";
  EXPECT_EQ(bf16_4k_backward.vpt, 2);
  const RowKernelConfig fp32_1k = plan_row_kernel(1024, 4, 1, limits);
  EXPECT_EQ(fp32_1k.threads, 64);
  EXPECT_EQ(fp32_1k.vpt, 4);
  const RowKernelConfig fp32_32k = plan_row_kernel(32768, 4, 1, limits);
  EXPECT_EQ(fp32_32k.threads, 512);
  EXPECT_EQ(fp32_32k.vpt, 16) << "64 floats a thread: one CTA holds the row";
  EXPECT_EQ(fp32_32k.cluster, 1);
  const RowKernelConfig fp32_12800 = plan_row_kernel(12800, 4, 1, limits);
  EXPECT_EQ(fp32_12800.vpt, 8);
  EXPECT_EQ(fp32_12800.threads, 416) << "3200 vectors: 400 threads' worth, rounded to whole warps";
}

TEST(RowKernelPlan, SixteenBitOneCtaRowsStreamThroughARing) {
  const RowKernelLimits limits;
  const RowKernelConfig bf16_4k = plan_row_kernel(4096, 2, 1, limits);
  EXPECT_EQ(bf16_4k.ring, kRowRing);
  EXPECT_EQ(bf16_4k.smem_bytes, std::size_t(kRowRing) * 4096 * 2);
  const RowKernelConfig backward = plan_row_kernel(4096, 2, 2, limits);
  EXPECT_EQ(backward.smem_bytes, std::size_t(kRowRing) * 4096 * 2 * 2) << "both inputs stream";
  EXPECT_EQ(plan_row_kernel(32768, 2, 1, limits).ring, kRowRing) << "64 KB tiles still double-buffer";
  EXPECT_EQ(plan_row_kernel(4096, 4, 1, limits).ring, 0) << "float32 rows load straight into registers";
  EXPECT_EQ(plan_row_kernel(262144, 2, 1, limits).ring, 0) << "cluster rows load straight into registers";
  EXPECT_EQ(plan_row_kernel(1 << 20, 2, 1, limits).ring, 0) << "multi-tile rows park, they do not stream";
  EXPECT_EQ(plan_row_kernel(256, 2, 1, limits).ring, 0) << "warp rows";
}

TEST(RowKernelPlan, RingFromAMinimumTileSize) {
  RowKernelLimits limits;
  limits.ring_min_tile_bytes = 32 * 1024;
  EXPECT_EQ(plan_row_kernel(4096, 2, 1, limits).ring, 0) << "8 KB tiles load directly";
  EXPECT_EQ(plan_row_kernel(12800, 2, 1, limits).ring, 0) << "26 KB tiles load directly";
  EXPECT_EQ(plan_row_kernel(32768, 2, 1, limits).ring, kRowRing) << "64 KB tiles stream";
  EXPECT_EQ(plan_row_kernel(16384, 2, 2, limits).ring, kRowRing) << "two inputs: 64 KB tiles";
}

TEST(RowKernelPlan, SixteenCtaClustersOnlyWhereTheyKeepTheRowOnChip) {
  RowKernelLimits limits;
  limits.max_cluster = 16;
  limits.max_block_threads = 512;
  EXPECT_EQ(plan_row_kernel(262144, 4, 1, limits).cluster, 8) << "8 CTAs hold a 1 MB row on chip";
  const RowKernelConfig bf16_mega = plan_row_kernel(1 << 20, 2, 1, limits);
  EXPECT_EQ(bf16_mega.cluster, 8) << "8 CTAs hold a 2 MB row: 64 KB of registers + 192 KB parked each";
  EXPECT_EQ(bf16_mega.stash_tiles, bf16_mega.tiles - 1);
  const RowKernelConfig fp32_mega = plan_row_kernel(1 << 20, 4, 1, limits);
  EXPECT_EQ(fp32_mega.cluster, 16) << "a 4 MB row needs 16 CTAs to stay on chip";
  EXPECT_EQ(fp32_mega.stash_tiles, fp32_mega.tiles - 1);
}

TEST(RowKernelPlan, SmallerTilesSpreadRowsOverClusters) {
  RowKernelLimits limits;
  const RowKernelConfig one_cta = plan_row_kernel(32768, 4, 1, limits);
  EXPECT_EQ(one_cta.cluster, 1) << "by default a 128 KB float32 row fills one CTA's 64-value tiles";
  EXPECT_EQ(one_cta.vpt, 16);
  limits.max_tile_values = 32;
  const RowKernelConfig two_ctas = plan_row_kernel(32768, 4, 1, limits);
  EXPECT_EQ(two_ctas.vpt, 8);
  EXPECT_EQ(two_ctas.cluster, 2);
  EXPECT_EQ(two_ctas.threads, 512);
  EXPECT_EQ(plan_row_kernel(8192, 4, 1, limits).vpt, 8) << "rows within the cap are planned as before";
  const RowKernelConfig wide = plan_row_kernel(262144, 4, 1, limits);
  EXPECT_EQ(wide.vpt, 16) << "16 CTAs of 32 values would leave the portable size: 8 of 64 instead";
  EXPECT_EQ(wide.cluster, 8);
  const RowKernelConfig streamed = plan_row_kernel(1 << 20, 4, 1, limits);
  EXPECT_GT(streamed.tiles, 1);
  EXPECT_EQ(streamed.vpt, 16) << "the streaming kernel exists for the largest tile only";
  for (int elem : {2, 4, 8})
    for (int inputs : {1, 2})
      for (int64_t n : row_lengths()) {
        const RowKernelConfig c = plan_row_kernel(n, elem, inputs, limits);
        EXPECT_GE(c.capacity(), n) << "n=" << n << " elem=" << elem << " inputs=" << inputs;
      }
}

TEST(RowKernelPlan, SmallSharedMemoryMeansNoStash) {
  RowKernelLimits tight;
  tight.max_smem_per_block = 1024;
  const RowKernelConfig c = plan_row_kernel(1 << 22, 4, 1, tight);
  EXPECT_GT(c.tiles, 1);
  EXPECT_EQ(c.stash_tiles, 0);
  EXPECT_EQ(c.smem_bytes, 0u);
}

// ---- split rows (RowSplitConfig) -----------------------------------------------------------

RowKernelLimits h200_limits() {
  RowKernelLimits limits;
  limits.sm_count = 132;
  limits.max_smem_per_sm = 228 * 1024;
  limits.max_smem_per_block = 227 * 1024 - 2048;
  // Every dtype splits (the split_max_elem_bytes override of 8 does the same on a device): the
  // tests below check the split plan itself; SplitByDefaultOnlySixteenBitRows the default.
  limits.split_max_elem_bytes = 8;
  return limits;
}

TEST(RowKernelPlan, SplitByDefaultOnlySixteenBitRows) {
  RowKernelLimits limits = h200_limits();
  limits.split_max_elem_bytes = RowKernelLimits{}.split_max_elem_bytes;
  EXPECT_EQ(plan_row_kernel(1 << 20, 2, 1, limits).split.chunks, 32);
  EXPECT_FALSE(plan_row_kernel(1 << 20, 2, 1, limits).split.reread);
  EXPECT_TRUE(plan_row_kernel(1 << 20, 4, 1, limits).split.reread) << "4 MB float32 rows split re-read";
  EXPECT_TRUE(plan_row_kernel(1 << 20, 8, 1, limits).split.reread) << "8 MB float64 rows split re-read";
  EXPECT_EQ(plan_row_kernel(262144, 2, 1, limits).split.chunks, 8) << "16-bit 8-CTA cluster rows split";
  EXPECT_EQ(plan_row_kernel(262144, 4, 1, limits).split.chunks, 0) << "float32 cluster rows do not";
  limits.split_reread_from_bytes = 0;
  EXPECT_EQ(plan_row_kernel(1 << 20, 4, 1, limits).split.chunks, 0) << "float32 rows stream";
  EXPECT_EQ(plan_row_kernel(1 << 20, 8, 1, limits).split.chunks, 0) << "float64 rows stream";
}

// Re-read splits: rows of at least split_reread_from_bytes the shared memory cannot split, at
// most one chunk a row a resident CTA (two an SM for 16-word tiles), no buffers.
TEST(RowKernelPlan, RereadSplitRowsFitTheResidentCtas) {
  RowKernelLimits limits = h200_limits();
  limits.split_max_elem_bytes = RowKernelLimits{}.split_max_elem_bytes;
  for (int elem : {2, 4, 8}) {
    for (int inputs : {1, 2}) {
      for (int64_t n : {int64_t(500000), int64_t(524288), int64_t(1000003), int64_t(1) << 20, int64_t(3) << 20,
                        int64_t(4194304), int64_t(10000000), int64_t(1) << 30}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " inputs=" << inputs);
        const RowKernelConfig c = plan_row_kernel(n, elem, inputs, limits);
        const RowSplitConfig& s = c.split;
        const int64_t vectors = (n * elem + 15) / 16;
        if (!s.reread) {
          EXPECT_TRUE(s.chunks > 0 || vectors * 16 * inputs < limits.split_reread_from_bytes)
              << "a row past the threshold that does not split on chip splits re-read";
          continue;
        }
        EXPECT_GE(vectors * 16 * inputs, limits.split_reread_from_bytes);
        EXPECT_EQ(s.threads, kRowSplitThreads);
        const int words = (elem >= 4 ? 4 : 8) * inputs;  // a vector of every input, in float32 words
        EXPECT_EQ(s.vpt * words, 16) << "16-word tiles";
        EXPECT_EQ(s.ring, 0);
        EXPECT_EQ(s.smem_bytes, 0u);
        EXPECT_GE(s.chunk_tiles * s.vpt, limits.split_reread_min_chunk_tiles * kRowSplitVpt);
        EXPECT_GE(s.chunks, 2);
        EXPECT_EQ(s.grid, limits.sm_count * 2);
        EXPECT_LE(s.chunks, s.grid) << "the resident CTAs take every chunk of a row at once";
        EXPECT_GE(s.chunks * s.chunk_vectors(), vectors) << "chunks cover the row";
        EXPECT_LT((s.chunks - 1) * s.chunk_vectors(), vectors) << "no chunk lies wholly past the row";
      }
    }
  }
  EXPECT_FALSE(plan_row_kernel(524288, 4, 1, limits).split.reread) << "2 MiB: under 4 MiB";
  EXPECT_TRUE(plan_row_kernel(524288, 4, 2, limits).split.reread) << "4 MiB over both inputs";
  const RowSplitConfig one_row = plan_row_kernel(4194304, 4, 1, limits).split;
  EXPECT_EQ(one_row.chunks, 128) << "16 MB: 512 tiles of 32 KB, 4 a chunk on 264 CTAs";
  EXPECT_EQ(one_row.chunk_tiles, 4);
  const RowSplitConfig two_inputs = plan_row_kernel(4194304, 4, 2, limits).split;
  EXPECT_EQ(two_inputs.vpt, 2);
  EXPECT_EQ(two_inputs.chunk_tiles, 8) << "two inputs: tiles of 2 vectors, 8 a chunk";
  EXPECT_EQ(two_inputs.chunks, 128);
  const RowSplitConfig bf16_two = plan_row_kernel(int64_t(8) << 20, 2, 2, limits).split;
  EXPECT_TRUE(bf16_two.reread);
  EXPECT_EQ(bf16_two.vpt, 1);
  EXPECT_EQ(bf16_two.chunk_tiles, 16) << "16-bit with a residual: tiles of one vector, 16 a chunk";
  EXPECT_EQ(bf16_two.chunks, 128) << "2^20 vectors, 8192 a chunk";
  const RowSplitConfig mega = plan_row_kernel(1 << 20, 4, 1, limits).split;
  EXPECT_EQ(mega.chunks, 32) << "4 MB: 128 tiles, 4 a chunk";
  limits.split_reread_min_chunk_tiles = 8;
  EXPECT_EQ(plan_row_kernel(1 << 20, 4, 1, limits).split.chunks, 16);
  EXPECT_TRUE(plan_row_kernel(5 << 20, 2, 1, limits).split.reread) << "10 MB 16-bit rows: 160 chunks on chip, past 132";
}

TEST(RowKernelPlan, SplitRowsAreStreamedRowsWhoseChunksTheGridHolds) {
  const RowKernelLimits limits = h200_limits();
  for (int elem : {2, 4, 8}) {
    for (int inputs : {1, 2}) {
      for (int64_t n : row_lengths()) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " inputs=" << inputs);
        const RowKernelConfig c = plan_row_kernel(n, elem, inputs, limits);
        const RowSplitConfig& s = c.split;
        if (c.tiles == 1 && c.cluster < limits.split_min_cluster) {
          EXPECT_EQ(s.chunks, 0) << "rows a small cluster holds in registers keep their path";
          continue;
        }
        const int64_t vectors = (n + c.vec - 1) / c.vec;
        if (s.chunks == 0 || s.reread) {
          // Only rows with more chunks than resident CTAs stay on the stream kernel (or re-read).
          const RowKernelConfig probe = plan_row_kernel(n, elem, inputs, [] {
            RowKernelLimits l = h200_limits();
            l.sm_count = 1 << 20;
            return l;
          }());
          EXPECT_GT(probe.split.chunks, 132);
          continue;
        }
        EXPECT_EQ(s.threads, kRowSplitThreads);
        EXPECT_EQ(s.vpt, kRowSplitVpt);
        EXPECT_GE(s.ring, 2);
        EXPECT_LE(s.ring, 4) << "the kernel waits for at most 3 groups";
        EXPECT_GE(s.chunk_tiles, 1);
        EXPECT_GE(s.chunks, 2);
        EXPECT_LE(s.chunks, s.grid) << "a CTA may only wait for chunks of resident CTAs";
        EXPECT_GE(s.chunks * s.chunk_vectors(), vectors) << "chunks cover the row";
        EXPECT_LT((s.chunks - 1) * s.chunk_vectors(), vectors) << "no chunk lies wholly past the row";
        EXPECT_EQ(s.smem_bytes, std::size_t(s.ring) * s.chunk_tiles * kRowSplitThreads * kRowSplitVpt * 16 * inputs);
        EXPECT_LE(s.smem_bytes, limits.max_smem_per_block);
        EXPECT_LE(s.grid * (s.smem_bytes + kRowSplitSmemReserve), limits.sm_count * limits.max_smem_per_sm)
            << "the planned grid fits the device's shared memory";
      }
    }
  }
}

TEST(RowKernelPlan, SplitChunksOfTheBenchmarkRows) {
  const RowKernelLimits limits = h200_limits();
  const RowKernelConfig fp32 = plan_row_kernel(1 << 20, 4, 1, limits);
  EXPECT_EQ(fp32.split.chunks, 64) << "16384-float chunks: 64 KB, two 32 KB tiles";
  EXPECT_EQ(fp32.split.chunk_vectors() * fp32.vec, 16384);
  EXPECT_EQ(fp32.split.ring, 3);
  EXPECT_EQ(fp32.split.smem_bytes, 3u * 64 * 1024);
  EXPECT_EQ(fp32.split.grid, 132) << "192 KB of chunk buffers: one CTA an SM";
  const RowKernelConfig bf16 = plan_row_kernel(1 << 20, 2, 1, limits);
  EXPECT_EQ(bf16.split.chunks, 32);
  EXPECT_EQ(bf16.split.chunk_vectors() * bf16.vec, 32768);
  const RowKernelConfig fp64 = plan_row_kernel(1 << 20, 8, 1, limits);
  EXPECT_EQ(fp64.split.chunks, 128);
  const RowSplitConfig past = plan_row_kernel(3 << 20, 4, 1, limits).split;
  EXPECT_TRUE(past.reread) << "192 chunks > 132 resident CTAs: re-read";
  EXPECT_EQ(past.chunks, 96) << "384 tiles, 4 a chunk on 264 CTAs";
  EXPECT_EQ(plan_row_kernel(3 << 20, 2, 1, limits).split.chunks, 96);
  EXPECT_EQ(plan_row_kernel(131072, 4, 1, limits).split.chunks, 0) << "4-CTA cluster rows keep their path";
  // The stream plan stays what it was: it runs the row when no workspace is given.
  EXPECT_EQ(fp32.cluster, 16);
  EXPECT_EQ(fp32.tiles, 2);
}

TEST(RowKernelPlan, SplitLeavesEveryOtherFieldAsItWas) {
  const RowKernelLimits plain;  // sm_count 0: no split rows
  const RowKernelLimits h200 = h200_limits();
  for (int elem : {2, 4, 8}) {
    for (int64_t n : row_lengths()) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem);
      RowKernelLimits same = plain;
      same.max_smem_per_block = h200.max_smem_per_block;
      const RowKernelConfig a = plan_row_kernel(n, elem, 1, same), b = plan_row_kernel(n, elem, 1, h200);
      EXPECT_EQ(a.split.chunks, 0);
      expect_same_layout(a, b);
    }
  }
}

TEST(RowKernelPlan, SplitGridFollowsSharedMemoryPerSm) {
  RowKernelLimits limits = h200_limits();
  limits.split_chunk_tiles = 1;
  const RowKernelConfig two = plan_row_kernel(1 << 20, 4, 1, limits);
  EXPECT_EQ(two.split.smem_bytes, 3u * 32 * 1024);
  EXPECT_EQ(two.split.grid, 264) << "96 KB of buffers: two CTAs an SM";
  EXPECT_EQ(two.split.chunks, 128);
  limits.split_chunk_tiles = 8;  // 768 KB of buffers: shrunk to what a CTA may have
  const RowKernelConfig shrunk = plan_row_kernel(1 << 20, 4, 1, limits);
  EXPECT_EQ(shrunk.split.chunk_tiles, 2);
  limits = h200_limits();
  limits.max_smem_per_sm = 100 * 1024;  // not one CTA of 192 KB an SM: re-read instead
  EXPECT_TRUE(plan_row_kernel(1 << 20, 4, 1, limits).split.reread);
  EXPECT_EQ(plan_row_kernel(1 << 20, 4, 1, limits).split.chunks, 32);
  limits = h200_limits();
  limits.sm_count = 12;  // 128 tiles, 24 resident re-read CTAs: 22 chunks of 6 tiles
  EXPECT_TRUE(plan_row_kernel(1 << 20, 4, 1, limits).split.reread);
  EXPECT_EQ(plan_row_kernel(1 << 20, 4, 1, limits).split.chunks, 22);
  limits.split_reread_from_bytes = 0;
  EXPECT_EQ(plan_row_kernel(1 << 20, 4, 1, limits).split.chunks, 0);
  limits = h200_limits();
  // Rows held by clusters of 5 or more CTAs split; smaller clusters do not (run 23).
  EXPECT_EQ(plan_row_kernel(262144, 4, 1, limits).split.chunks, 16) << "8-CTA cluster";
  EXPECT_EQ(plan_row_kernel(262144, 2, 1, limits).split.chunks, 8);
  EXPECT_EQ(plan_row_kernel(196608, 2, 1, limits).split.chunks, 6) << "6-CTA cluster";
  EXPECT_EQ(plan_row_kernel(131072, 2, 1, limits).split.chunks, 0) << "4-CTA cluster";
  EXPECT_EQ(plan_row_kernel(65536, 2, 1, limits).split.chunks, 0);
  limits.split_min_cluster = 2;  // the tuning knob: every cluster row splits
  EXPECT_EQ(plan_row_kernel(65536, 2, 1, limits).split.chunks, 2);
  EXPECT_EQ(plan_row_kernel(32768, 4, 1, limits).split.chunks, 0) << "one-CTA rows never split";
}

// Re-read rows (the tuning knob, for every family): rows past one CTA's tile, and one-CTA rows of
// tiles above the threshold, take small tiles on one CTA, no cluster, no stash; every other row
// keeps its plan, and the split plan stays as it was.
TEST(RowKernelPlan, RereadRowsTakeSmallTilesOnOneCta) {
  RowKernelLimits reread = h200_limits();
  reread.reread_above_words = kRereadPastOneCta;
  reread.reread_small_tiles_from_bytes = kRereadMaxRowBytes + 1;  // 16-word tiles; small ones below
  for (int elem : {2, 4, 8}) {
    for (int inputs : {1, 2}) {
      for (int64_t n : row_lengths()) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " inputs=" << inputs);
        const RowKernelConfig held = plan_row_kernel(n, elem, inputs, h200_limits());
        const RowKernelConfig c = plan_row_kernel(n, elem, inputs, reread);
        if (held.kind == RowKernelKind::kWarp || (held.cluster == 1 && held.tiles == 1) ||
            n * elem * inputs > kRereadMaxRowBytes) {
          expect_same_layout(c, held);
          continue;
        }
        EXPECT_EQ(c.kind, RowKernelKind::kBlock);
        EXPECT_EQ(c.cluster, 1);
        EXPECT_EQ(c.stash_tiles, 0);
        EXPECT_EQ(c.smem_bytes, 0u);
        EXPECT_EQ(c.ring, 0);
        EXPECT_EQ(c.threads, 512);
        const int vector_words = c.vec * (elem == 8 ? 2 : 1) * inputs;
        EXPECT_EQ(c.vpt * vector_words, std::max(kRereadTileWords, vector_words))
            << "tiles of 16 words, or of one vector where that is more";
        EXPECT_GE(c.tiles, 2) << "longer than one CTA's tile, so longer than one small tile";
        EXPECT_GE(c.capacity(), n);
        EXPECT_LT(c.capacity() - int64_t(c.threads) * c.vpt * c.vec, n) << "no tile lies wholly past the row";
        EXPECT_EQ(c.split.chunks, held.split.chunks);
      }
    }
  }
  EXPECT_EQ(plan_row_kernel(12800, 4, 1, reread).tiles, 1) << "one CTA of 32-value tiles stays";
  reread.reread_above_words = 16;
  const RowKernelConfig one_cta = plan_row_kernel(12800, 4, 1, reread);
  EXPECT_EQ(one_cta.vpt * one_cta.vec, 16);
  EXPECT_EQ(one_cta.tiles, 2) << "12800 floats in tiles of 512 x 16";
  EXPECT_EQ(plan_row_kernel(8192, 4, 1, reread).vpt * 4, 16) << "16-value tiles stay held";
  EXPECT_EQ(plan_row_kernel(8192, 4, 1, reread).tiles, 1);
  reread.max_block_threads = 256;
  EXPECT_EQ(plan_row_kernel(32768, 4, 1, reread).threads, 256);
  EXPECT_EQ(plan_row_kernel(32768, 4, 1, reread).tiles, 8) << "32768 floats in tiles of 256 x 16";
  EXPECT_EQ(plan_row_kernel(32768, 4, 1, h200_limits()).cluster, 1) << "held: one CTA of 64-value tiles";
}

// The shipped re-read rule (run 25): 16-bit rows past one CTA re-read in every family, float32
// ones only in layer_norm, whose one-CTA rows re-read from tiles above 16 words (float32) or 32
// (16-bit); float64 keeps its clusters.
TEST(RowKernelPlan, RereadRowsByFamilyAndElementSize) {
  const auto plan = [](RowFamily family, int64_t n, int elem, int inputs) {
    RowKernelLimits limits = h200_limits();
    limits.reread_above_words = reread_above_words_for(family, elem);
    limits.reread_ragged_lengths_only = row_policy(family, elem).reread_ragged_lengths_only;
    return plan_row_kernel(n, elem, inputs, limits);
  };
  const auto rereads = [](const RowKernelConfig& c) { return c.kind == RowKernelKind::kBlock && c.tiles > 1 && c.cluster == 1 && c.stash_tiles == 0; };
  for (RowFamily family : {RowFamily::kRowwise, RowFamily::kLayerNormForward, RowFamily::kRmsNormForward,
                            RowFamily::kRmsNormBiasForward, RowFamily::kResidualLayerNormForward,
                            RowFamily::kResidualRmsNormForward, RowFamily::kNormBackward}) {
    const int inputs = family == RowFamily::kNormBackward ? 2 : 1;
    SCOPED_TRACE(testing::Message() << "family " << static_cast<int>(family));
    EXPECT_TRUE(rereads(plan(family, 65536, 2, inputs)));
    EXPECT_TRUE(rereads(plan(family, 262144, 2, inputs)));
    EXPECT_FALSE(rereads(plan(family, 4096, 2, inputs)));
    EXPECT_EQ(rereads(plan(family, 65535, 4, inputs)), family == RowFamily::kLayerNormForward || is_residual_family(family));
    EXPECT_FALSE(rereads(plan(family, 65536, 4, inputs))) << "float32 whole vectors past one CTA: held";
    EXPECT_FALSE(rereads(plan(family, 65536, 8, inputs)));
    EXPECT_FALSE(rereads(plan(family, 1 << 20, 2, inputs))) << "2 MiB rows keep their clusters";
    EXPECT_EQ(reread_above_words_for(family, 8), 0);
  }
  EXPECT_TRUE(rereads(plan(RowFamily::kLayerNormForward, 12800, 4, 1))) << "32-word float32 tiles re-read";
  EXPECT_FALSE(rereads(plan(RowFamily::kLayerNormForward, 8192, 4, 1))) << "16-word float32 tiles stay";
  EXPECT_TRUE(rereads(plan(RowFamily::kLayerNormForward, 12800, 2, 1))) << "32-word 16-bit tiles re-read";
  EXPECT_FALSE(rereads(plan(RowFamily::kLayerNormForward, 8192, 2, 1))) << "16-word 16-bit tiles stay";
  EXPECT_TRUE(rereads(plan(RowFamily::kLayerNormForward, 32768, 2, 1)));
  EXPECT_FALSE(rereads(plan(RowFamily::kRowwise, 32768, 2, 1))) << "one CTA of 64 words stays";
  EXPECT_FALSE(rereads(plan(RowFamily::kRowwise, 32768, 4, 1)));
  // Float32 layer_norm and residual rows past one CTA re-read where their length is ragged only.
  for (int64_t n : {50257, 100001, 151935}) EXPECT_TRUE(rereads(plan(RowFamily::kLayerNormForward, n, 4, 1))) << n;
  for (int64_t n : {50264, 128256, 151936}) EXPECT_FALSE(rereads(plan(RowFamily::kLayerNormForward, n, 4, 1))) << n;
  for (RowFamily family : {RowFamily::kResidualLayerNormForward, RowFamily::kResidualRmsNormForward}) {
    for (int64_t n : {32767, 50257, 50263, 100001}) EXPECT_TRUE(rereads(plan(family, n, 4, 2))) << n;
    for (int64_t n : {32768, 50264, 100000}) EXPECT_FALSE(rereads(plan(family, n, 4, 2))) << n;
    EXPECT_FALSE(rereads(plan(family, 4097, 4, 2))) << "one CTA stays";
  }
}

// The policy table (row_policy): every family's settings in every element size, pinned. A change
// here is a change of what ships, to be measured first (bench/results/LOG.md names the runs).
TEST(RowKernelPlan, PolicyTablePinsEveryFamily) {
  const RowKernelLimits defaults;
  struct Want {
    RowFamily family;
    int elem;
    int reread_above_words, block_elems, max_tile_values;
    std::size_t stash, ring_min_tile;
    bool staged;
    bool over_split;
    bool wide;
  };
  constexpr std::size_t K = 1024;
  const int d_block = defaults.block_elems, d_tile = defaults.max_tile_values;
  const Want table[] = {
      {RowFamily::kRowwise, 2, kRereadPastOneCta, d_block, d_tile, kRereadStashBytes, 32 * K, true, true, false},
      {RowFamily::kRowwise, 4, 0, d_block, d_tile, kRereadStashBytes, 32 * K, true, true, false},
      {RowFamily::kRowwise, 8, 0, d_block, d_tile, kRereadStashBytes, 32 * K, false, true, false},
      {RowFamily::kLayerNormForward, 2, 16, 16, d_tile, 0, 0, true, true, true},
      {RowFamily::kLayerNormForward, 4, 16, 16, d_tile, 32 * K, 0, true, true, true},
      {RowFamily::kLayerNormForward, 8, 0, d_block, d_tile, 0, 0, false, true, false},
      {RowFamily::kRmsNormForward, 2, kRereadPastOneCta, d_block, d_tile, 0, 0, true, true, true},
      {RowFamily::kRmsNormForward, 4, 0, 16, 32, 0, 0, true, true, true},
      {RowFamily::kRmsNormForward, 8, 0, d_block, d_tile, 0, 0, false, true, false},
      {RowFamily::kRmsNormBiasForward, 2, kRereadPastOneCta, 16, d_tile, 0, 0, true, true, true},
      {RowFamily::kRmsNormBiasForward, 4, 0, 16, 32, 0, 0, true, true, true},
      {RowFamily::kRmsNormBiasForward, 8, 0, d_block, d_tile, 0, 0, false, true, false},
      {RowFamily::kResidualLayerNormForward, 2, kRereadPastOneCta, d_block, d_tile, 0, 0, false, true, true},
      {RowFamily::kResidualLayerNormForward, 4, kRereadPastOneCta, d_block, d_tile, 0, 0, false, true, true},
      {RowFamily::kResidualLayerNormForward, 8, 0, d_block, d_tile, 0, 0, false, true, false},
      {RowFamily::kResidualRmsNormForward, 2, kRereadPastOneCta, d_block, d_tile, 0, 0, false, true, true},
      {RowFamily::kResidualRmsNormForward, 4, kRereadPastOneCta, d_block, d_tile, 0, 0, false, true, true},
      {RowFamily::kResidualRmsNormForward, 8, 0, d_block, d_tile, 0, 0, false, true, false},
      {RowFamily::kNormBackward, 2, kRereadPastOneCta, d_block, d_tile, kRereadStashBytes, 0, false, false, false},
      {RowFamily::kNormBackward, 4, 0, d_block, d_tile, kRereadStashBytes, 0, false, false, false},
      {RowFamily::kNormBackward, 8, 0, d_block, d_tile, kRereadStashBytes, 0, false, false, false},
  };
  for (const Want& w : table) {
    SCOPED_TRACE(testing::Message() << "family " << static_cast<int>(w.family) << " elem " << w.elem);
    const RowKernelLimits l = row_policy(w.family, w.elem);
    EXPECT_EQ(l.reread_above_words, w.reread_above_words);
    EXPECT_EQ(l.block_elems, w.block_elems);
    EXPECT_EQ(l.max_tile_values, w.max_tile_values);
    EXPECT_EQ(l.reread_stash_bytes, w.stash);
    EXPECT_EQ(l.ring_min_tile_bytes, w.ring_min_tile);
    // The bands themselves: StagedRowsOnlyInTheirBands.
    EXPECT_EQ(l.staged[0].threads != 0, w.staged);
    if (!w.staged)
      for (const StagedBand& band : l.staged) EXPECT_EQ(band.threads, 0);
    EXPECT_EQ(l.reread_over_split, w.over_split);
    EXPECT_EQ(l.wide_rows, w.wide);
    const bool layer_norm16 = w.family == RowFamily::kLayerNormForward && w.elem == 2;  // its own band
    const bool layer_norm32 = w.family == RowFamily::kLayerNormForward && w.elem == 4;  // and this one
    const bool residual = is_residual_family(w.family);
    const bool residual16 = residual && w.elem == 2;  // layer_norm's bands
    const bool residual32 = residual && w.elem == 4;
    const bool bands16 = layer_norm16 || residual16, bands32 = layer_norm32 || residual32;
    const bool bias16 = w.family == RowFamily::kRmsNormBiasForward && w.elem == 2;
    const bool rms_norm16 = (w.family == RowFamily::kRmsNormForward && w.elem == 2) || bias16;  // a lower one
    EXPECT_EQ(l.wide_above_threads,
              bands16                                                  ? 224
              : bands32 && w.family == RowFamily::kResidualRmsNormForward ? 416
              : bands32                                                  ? 256
              : bias16                                                   ? 127
              : rms_norm16                                               ? 96
                                                                         : defaults.wide_above_threads);
    EXPECT_EQ(l.wide_whole_above_threads, bands16 ? 16 : layer_norm32 ? 224 : 0);
    EXPECT_EQ(l.wide_max_threads, layer_norm16 ? 512 : defaults.wide_max_threads);
    EXPECT_EQ(l.wide_partial_max_threads, residual32 ? 896 : layer_norm32 || residual16 ? 512 : 0);
    EXPECT_EQ(l.wide_ragged, !bands16 && !bands32);
    EXPECT_EQ(l.wide_input_sums, residual16 || residual32);
    EXPECT_EQ(l.wide_lean_max_threads, layer_norm16 ? 416 : 0);
    EXPECT_EQ(l.wide_whole_roomy_max_threads, layer_norm16 ? 384 : bias16 ? kWideRowThreads : 0);
    const bool residual_rms = w.family == RowFamily::kResidualRmsNormForward && w.elem <= 4;
    EXPECT_EQ(l.wide_roomy_max_threads, residual_rms ? kWideRowThreads : rms_norm16 && !bias16 ? 512 : 0);
    EXPECT_EQ(l.wide_mid_max_threads, rms_norm16 ? kWideMidRowThreads : 0);
    const bool rms_norm32 = (w.family == RowFamily::kRmsNormForward || w.family == RowFamily::kRmsNormBiasForward) && w.elem == 4;
    EXPECT_EQ(l.wide_fill_above_threads, bands32 || rms_norm32 ? 512 : 0);
    EXPECT_EQ(l.reread_ragged_lengths_only, (residual || w.family == RowFamily::kLayerNormForward) && w.elem == 4);
    // The device's fields stay the defaults: row_kernel_limits fills them in.
    EXPECT_EQ(l.sm_count, defaults.sm_count);
    EXPECT_EQ(l.max_cluster, defaults.max_cluster);
    EXPECT_EQ(l.max_block_threads, defaults.max_block_threads);
    EXPECT_EQ(l.min_block_threads, defaults.min_block_threads);
    EXPECT_EQ(l.ring, defaults.ring);
    EXPECT_EQ(l.two_phase, defaults.two_phase);
    EXPECT_EQ(l.split_min_cluster, defaults.split_min_cluster);
    EXPECT_EQ(l.split_max_elem_bytes, defaults.split_max_elem_bytes);
    EXPECT_EQ(l.split_reread_from_bytes, defaults.split_reread_from_bytes);
    const bool layer_norm = w.family == RowFamily::kLayerNormForward;
    EXPECT_EQ(l.reread_small_tiles_from_bytes,
              layer_norm && w.elem == 2 ? 0 : defaults.reread_small_tiles_from_bytes);
    EXPECT_EQ(l.l2_hints_from_bytes, layer_norm && w.elem <= 4 ? 0 : defaults.l2_hints_from_bytes);
  }
}

// The shipped plan of a family's rows on an H200.
RowKernelLimits policy_on_h200(RowFamily family, int elem) {
  RowKernelLimits limits = row_policy(family, elem);
  const RowKernelLimits device = h200_limits();
  limits.sm_count = device.sm_count;
  limits.max_smem_per_sm = device.max_smem_per_sm;
  limits.max_smem_per_block = device.max_smem_per_block;
  return limits;
}

RowKernelConfig plan_on_h200(RowFamily family, int64_t n, int elem, int inputs) {
  return plan_row_kernel(n, elem, inputs, policy_on_h200(family, elem));
}

// Staged rows (row_staged.cuh): 16-bit one-input rowwise rows in three bands: 16-40 KiB in one
// 256-thread CTA a row, 64-110 KiB in one 512-thread CTA, 128-880 KiB over clusters of 2-8 such
// CTAs; shared memory for the row at any alignment; float32 rows of ragged length in the same
// bands, the one-CTA band from 40 KiB; nothing else is staged.
TEST(RowKernelPlan, StagedRowsOnlyInTheirBands) {
  // Row length -> CTA size and CTAs a row.
  struct Want { int64_t n; int threads, ctas; };
  for (const Want w : {Want{8193, 256, 1}, Want{11008, 256, 1}, Want{12800, 256, 1}, Want{16384, 256, 1}, Want{20480, 256, 1},
                       Want{32769, 512, 1}, Want{40009, 512, 1}, Want{50257, 512, 1}, Want{56320, 512, 1},
                       Want{65537, 512, 2}, Want{128256, 512, 3}, Want{151936, 512, 3}, Want{256000, 512, 5},
                       Want{262144, 512, 5}, Want{450560, 512, 8}}) {
    SCOPED_TRACE(testing::Message() << "n=" << w.n);
    const RowKernelConfig c = plan_on_h200(RowFamily::kRowwise, w.n, 2, 1);
    EXPECT_EQ(c.kind, RowKernelKind::kStaged);
    EXPECT_EQ(c.threads, w.threads);
    EXPECT_EQ(c.vpt, 1);
    EXPECT_EQ(c.cluster, w.ctas);
    const int64_t vectors = (w.n + 7) / 8, share = (vectors + w.ctas - 1) / w.ctas;
    EXPECT_EQ(c.tiles, (share + c.threads - 1) / c.threads) << "tiles: the vectors a thread strides over";
    EXPECT_GE(c.capacity(), w.n);
    EXPECT_EQ(c.smem_bytes, staged_share_smem_bytes(share));
    EXPECT_GE(c.smem_bytes, std::size_t(16 * share + 48)) << "the share, a spare granule before and two after";
    const int per_sm = w.threads == 256 ? 4 : 2;
    EXPECT_LE(per_sm * (c.smem_bytes + 2048), h200_limits().max_smem_per_sm) << per_sm << " CTAs an SM";
    EXPECT_EQ(c.split.chunks, 0);
  }
  for (int64_t n : {8192, 20481, 24576, 32768, 56321, 65536, 450561, 1 << 20})
    EXPECT_NE(plan_on_h200(RowFamily::kRowwise, n, 2, 1).kind, RowKernelKind::kStaged)
        << n << ": between or past the bands";
  EXPECT_NE(plan_on_h200(RowFamily::kRowwise, 50257, 2, 2).kind, RowKernelKind::kStaged) << "backward rows";
  for (int elem : {4, 8}) EXPECT_NE(plan_on_h200(RowFamily::kRowwise, 20000, elem, 1).kind, RowKernelKind::kStaged);
  // float32: the same bands by bytes, for ragged lengths only; the one-CTA band from 40 KiB.
  for (const Want w : {Want{5001, 256, 1}, Want{8191, 256, 1}, Want{10239, 256, 1}, Want{10241, 512, 1},
                       Want{11011, 512, 1}, Want{14339, 512, 1}, Want{16001, 512, 1}, Want{20483, 512, 1}, Want{28159, 512, 1},
                       Want{50257, 512, 2}, Want{128257, 512, 5}, Want{151937, 512, 6}, Want{225279, 512, 8}}) {
    SCOPED_TRACE(testing::Message() << "float32 n=" << w.n);
    const RowKernelConfig c = plan_on_h200(RowFamily::kRowwise, w.n, 4, 1);
    EXPECT_EQ(c.kind, RowKernelKind::kStaged);
    EXPECT_EQ(c.threads, w.threads);
    EXPECT_EQ(c.cluster, w.ctas);
    EXPECT_GE(c.capacity(), w.n);
  }
  for (int64_t n : {5000, 8192, 11008, 20480, 28160, 50264, 128256, 151936, 32001, 225281})
    EXPECT_NE(plan_on_h200(RowFamily::kRowwise, n, 4, 1).kind, RowKernelKind::kStaged)
        << "float32 " << n << ": whole vectors, or between or past the bands";
  EXPECT_NE(plan_on_h200(RowFamily::kRowwise, 50257, 4, 2).kind, RowKernelKind::kStaged) << "float32 backward rows";
  for (RowFamily family :
       {RowFamily::kResidualLayerNormForward, RowFamily::kResidualRmsNormForward, RowFamily::kNormBackward}) {
    for (const StagedBand& band : staged_bands_for(family, 2)) EXPECT_EQ(band.threads, 0);
    EXPECT_NE(plan_on_h200(family, 50257, 2, 2).kind, RowKernelKind::kStaged);
  }
  RowKernelLimits small = h200_limits();
  small.staged = staged_bands_for(RowFamily::kRowwise, 2);
  small.max_smem_per_block = 96 << 10;
  EXPECT_NE(plan_row_kernel(50257, 2, 1, small).kind, RowKernelKind::kStaged) << "a share that does not fit one CTA";
  small.max_smem_per_block = h200_limits().max_smem_per_block;
  small.max_cluster = 2;
  EXPECT_EQ(plan_row_kernel(65537, 2, 1, small).kind, RowKernelKind::kStaged);
  EXPECT_NE(plan_row_kernel(128256, 2, 1, small).kind, RowKernelKind::kStaged) << "a cluster past the device's";
  // A share past the staged kernels' mbarriers (kStagedMaxChunks bulk copies of
  // kStagedChunkGranules granules), on a device with the shared memory to hold it.
  RowKernelLimits roomy = h200_limits();
  roomy.max_smem_per_block = std::size_t(512) << 10;
  roomy.staged = {};
  roomy.staged[0] = StagedBand{0, std::size_t(1) << 30, kStagedThreads, std::size_t(400) << 10};
  const int64_t most = int64_t(kStagedMaxChunks) * kStagedChunkGranules - 3;  // vectors a share holds
  const RowKernelConfig fits = plan_row_kernel(most * 8, 2, 1, roomy);
  EXPECT_EQ(fits.kind, RowKernelKind::kStaged);
  EXPECT_EQ(fits.cluster, 1);
  EXPECT_NE(plan_row_kernel(most * 8 + 8, 2, 1, roomy).kind, RowKernelKind::kStaged) << "a share past the barriers";
}

// The cross-entropy step's bands (cross_entropy_staged_bands), 16-bit and float32 rows by bytes:
// the softmax's third, one 256-thread CTA for every row of 16-72 KiB, one 512-thread CTA for
// every row of 72-128 KiB and clusters of 200 KiB shares from 880 KiB to 1600 KiB; the forward's
// second band ends at the softmax's, 110 KiB, and it has no fourth.
TEST(RowKernelPlan, CrossEntropyStagesEveryRowBetweenItsBands) {
  struct Want { int64_t n; int elem, threads, ctas; };
  for (const Want w : {Want{10000, 4, kStagedSmallThreads, 1}, Want{12000, 4, kStagedSmallThreads, 1},
                       Want{18432, 4, kStagedSmallThreads, 1}, Want{18433, 4, kStagedThreads, 1},
                       Want{28000, 4, kStagedThreads, 1}, Want{32000, 4, kStagedThreads, 1},
                       Want{32768, 4, kStagedThreads, 1}, Want{32769, 4, kStagedThreads, 2},
                       Want{50257, 4, kStagedThreads, 2}, Want{225280, 4, kStagedThreads, 8},
                       Want{20481, 2, kStagedSmallThreads, 1}, Want{32000, 2, kStagedSmallThreads, 1},
                       Want{36864, 2, kStagedSmallThreads, 1}, Want{36865, 2, kStagedThreads, 1},
                       Want{61440, 2, kStagedThreads, 1},
                       Want{65536, 2, kStagedThreads, 1}, Want{65537, 2, kStagedThreads, 2},
                       Want{225281, 4, kStagedThreads, 5}, Want{256000, 4, kStagedThreads, 5},
                       Want{409600, 4, kStagedThreads, 8}, Want{450561, 2, kStagedThreads, 5},
                       Want{819200, 2, kStagedThreads, 8}}) {
    SCOPED_TRACE(testing::Message() << "n=" << w.n << " elem=" << w.elem);
    RowKernelLimits l = policy_on_h200(RowFamily::kRowwise, w.elem);
    l.staged = cross_entropy_staged_bands(true);
    const RowKernelConfig c = plan_row_kernel(w.n, w.elem, 1, l);
    ASSERT_EQ(c.kind, RowKernelKind::kStaged);
    EXPECT_EQ(c.threads, w.threads);
    EXPECT_EQ(c.cluster, w.ctas);
    EXPECT_GE(int64_t(c.cluster) * c.smem_bytes, w.n * w.elem) << "the whole row staged";
  }
  for (const auto [n, elem] : {std::pair<int64_t, int>{4000, 4}, {409601, 4}, {8000, 2}, {819201, 2}}) {
    RowKernelLimits l = policy_on_h200(RowFamily::kRowwise, elem);
    l.staged = cross_entropy_staged_bands(true);
    EXPECT_NE(plan_row_kernel(n, elem, 1, l).kind, RowKernelKind::kStaged) << n << " x " << elem << " bytes";
  }
  const auto step = cross_entropy_staged_bands(true), forward = cross_entropy_staged_bands(false);
  EXPECT_EQ(forward[1].max_row_bytes, staged_bands_for(RowFamily::kRowwise, 2)[1].max_row_bytes);
  EXPECT_EQ(forward[1].min_row_bytes, step[1].min_row_bytes);
  for (std::size_t b : {std::size_t(0), std::size_t(2)}) {
    EXPECT_EQ(forward[b].min_row_bytes, step[b].min_row_bytes);
    EXPECT_EQ(forward[b].max_row_bytes, step[b].max_row_bytes);
    EXPECT_EQ(forward[b].share_bytes, step[b].share_bytes);
  }
  EXPECT_EQ(forward[3].threads, 0) << "the forward alone stages no cluster (cross_entropy_forward)";
}

// The plain rms_norm forward stages 16-bit rows of 56-110 KiB in one 512-thread CTA and of
// 110-880 KiB over clusters of such shares (whole-vector rows of 110-128 KiB re-read) and float32
// rows of 110-880 KiB whose length is not a multiple of four (72 KiB shares to 576 KiB, then
// 110 KiB ones); the fused residual forms (two inputs), float64 and rows past eight shares are not
// staged.
TEST(RowKernelPlan, RmsNormStagesItsBands) {
  struct Want { int64_t n; int elem, ctas; };
  for (const Want w : {Want{28673, 2, 1}, Want{32776, 2, 1}, Want{50257, 2, 1}, Want{56320, 2, 1}, Want{57345, 2, 2}, Want{65535, 2, 2}, Want{65537, 2, 2},
                       Want{262144, 2, 5}, Want{28161, 4, 2}, Want{32769, 4, 2}, Want{50257, 4, 3},
                       Want{50262, 4, 3}, Want{147455, 4, 8}, Want{147457, 4, 6}, Want{225279, 4, 8}}) {
    SCOPED_TRACE(testing::Message() << "n=" << w.n << " elem=" << w.elem);
    const RowKernelConfig c = plan_on_h200(RowFamily::kRmsNormForward, w.n, w.elem, 1);
    EXPECT_EQ(c.kind, RowKernelKind::kStaged);
    EXPECT_EQ(c.threads, kStagedThreads);
    EXPECT_EQ(c.cluster, w.ctas);
    const int vec = 16 / w.elem;
    const int64_t vectors = (w.n + vec - 1) / vec, share = (vectors + w.ctas - 1) / w.ctas;
    EXPECT_EQ(c.smem_bytes, staged_share_smem_bytes(share));
    EXPECT_EQ(c.split.chunks, 0);
  }
  for (const Want w : {Want{28672, 2, 0}, Want{32768, 2, 0}, Want{57344, 2, 0}, Want{65536, 2, 0}, Want{12800, 2, 0}, Want{8193, 2, 0}, Want{1 << 20, 2, 0}, Want{28160, 4, 0},
                       Want{4096, 4, 0}, Want{11008, 4, 0}, Want{225281, 4, 0}, Want{32768, 4, 0},
                       Want{50264, 4, 0}, Want{225280, 4, 0}, Want{32768, 8, 0}})
    EXPECT_NE(plan_on_h200(RowFamily::kRmsNormForward, w.n, w.elem, 1).kind, RowKernelKind::kStaged)
        << w.n << " x " << w.elem << " bytes";
  for (const StagedBand& band : staged_bands_for(RowFamily::kRmsNormForward, 8)) EXPECT_EQ(band.threads, 0);
  EXPECT_NE(plan_on_h200(RowFamily::kResidualRmsNormForward, 32768, 2, 2).kind, RowKernelKind::kStaged) << "two inputs";
}

// The plain layer_norm forward stages 16-bit rows of 56-880 KiB whose length is not a multiple of
// eight (one 512-thread CTA to 110 KiB, then clusters of such shares), float32 rows of 56-88 KiB
// whose length is not a multiple of four (one CTA) and float32 rows of 88-880 KiB at any alignment
// past the wide rows: 110 KiB shares to 224 KiB, 72 KiB shares to 576 KiB, 110 KiB shares past
// it; the residual form (two inputs), float64 and longer rows are not staged.
TEST(RowKernelPlan, LayerNormStagesItsBands) {
  struct Want { int64_t n; int elem, ctas, share_kib; };
  for (const Want w : {Want{28673, 2, 1, 110}, Want{32769, 2, 1, 110}, Want{50257, 2, 1, 110}, Want{56321, 2, 2, 110},
                       Want{128257, 2, 3, 110}, Want{450559, 2, 8, 110}, Want{14337, 4, 1, 110},
                       Want{16001, 4, 1, 110}, Want{20001, 4, 1, 110}, Want{22527, 4, 1, 110}, Want{22529, 4, 1, 110},
                       Want{24577, 4, 1, 110}, Want{32769, 4, 2, 110}, Want{50257, 4, 2, 110},
                       Want{50264, 4, 2, 110}, Want{57344, 4, 3, 110}, Want{57345, 4, 4, 72},
                       Want{65536, 4, 4, 72}, Want{128256, 4, 7, 72}, Want{147456, 4, 8, 72},
                       Want{151936, 4, 6, 110}, Want{225280, 4, 8, 110}}) {
    SCOPED_TRACE(testing::Message() << "n=" << w.n << " elem=" << w.elem);
    const RowKernelConfig c = plan_on_h200(RowFamily::kLayerNormForward, w.n, w.elem, 1);
    EXPECT_EQ(c.kind, RowKernelKind::kStaged);
    EXPECT_EQ(c.threads, kStagedThreads);
    EXPECT_EQ(c.cluster, w.ctas);
    EXPECT_EQ(c.cluster, (w.n * w.elem + w.share_kib * 1024 - 1) / (w.share_kib * 1024)) << "the band's shares";
    const int vec = 16 / w.elem;
    const int64_t vectors = (w.n + vec - 1) / vec, share = (vectors + w.ctas - 1) / w.ctas;
    EXPECT_EQ(c.smem_bytes, staged_share_smem_bytes(share));
  }
  for (const Want w : {Want{28671, 2, 0, 0}, Want{11011, 2, 0, 0}, Want{50264, 2, 0, 0}, Want{65536, 2, 0, 0},
                       Want{128256, 2, 0, 0}, Want{450561, 2, 0, 0}, Want{14335, 4, 0, 0}, Want{16000, 4, 0, 0},
                       Want{20480, 4, 0, 0}, Want{12001, 4, 0, 0}, Want{11011, 4, 0, 0},
                       Want{32768, 4, 0, 0}, Want{225281, 4, 0, 0}, Want{256000, 4, 0, 0}, Want{50257, 8, 0, 0}})
    EXPECT_NE(plan_on_h200(RowFamily::kLayerNormForward, w.n, w.elem, 1).kind, RowKernelKind::kStaged)
        << w.n << " x " << w.elem << " bytes";
  for (int elem : {2, 4}) {
    for (const StagedBand& band : staged_bands_for(RowFamily::kResidualLayerNormForward, elem))
      EXPECT_EQ(band.threads, 0);
    EXPECT_NE(plan_on_h200(RowFamily::kResidualLayerNormForward, 50257, elem, 2).kind, RowKernelKind::kStaged);
  }
}

// L2 eviction hints (row_stream.cuh) on re-read rows of l2_hints_from_bytes and more: every
// 16- and 32-bit layer_norm row (0), the other families' rows from 64 KiB.
TEST(RowKernelPlan, L2HintsOnLayerNormRowsAndLongRowsElsewhere) {
  struct Want { int64_t n; int elem; };
  // (rows the staged bands leave: staged_bands_for)
  for (const Want w : {Want{65536, 2}, Want{28671, 2}, Want{262144, 2}, Want{14335, 4}, Want{262145, 4},
                       Want{12801, 4}, Want{12801, 2}, Want{10241, 4}, Want{9001, 4}, Want{13001, 4}}) {
    const RowKernelConfig c = plan_on_h200(RowFamily::kLayerNormForward, w.n, w.elem, 1);
    EXPECT_GT(c.tiles, 1) << "n=" << w.n << " elem=" << w.elem << ": a re-read row";
    EXPECT_TRUE(c.l2_hints) << "n=" << w.n << " elem=" << w.elem;
  }
  EXPECT_FALSE(plan_on_h200(RowFamily::kLayerNormForward, 6000, 8, 1).l2_hints) << "float64 from 64 KiB";
  EXPECT_TRUE(plan_on_h200(RowFamily::kResidualLayerNormForward, 50257, 4, 2).l2_hints);
  EXPECT_FALSE(plan_on_h200(RowFamily::kResidualLayerNormForward, 4097, 4, 2).l2_hints);
  RowKernelLimits limits = row_policy(RowFamily::kResidualLayerNormForward, 2);
  limits.l2_hints_from_bytes = 0;
  limits.wide_rows = false;  // a re-read row, not a wide one
  EXPECT_TRUE(plan_row_kernel(4096, 2, 1, limits).l2_hints) << "0: every row";
}

// Wide rows: rms_norm rows of 3072 < n <= 32768 values (16-bit; with a bias from 4065) and of
// 16384 < n <= 32768 (float32; one input) take one CTA of whole warps, 32 values a thread (float32:
// 1024-thread CTAs of 5-8 vectors a thread), read once; lengths of whole vectors ahead of the staged
// bands, ragged ones where no band takes them. 16-bit layer_norm's band is 7168 < n <= 16384 (whole rows of 32 values a thread from 1024),
// whole vectors only (LayerNormWideRowsAreWholeVectorsOf1KTo16K); other families, two inputs
// and the knob off keep the plans of before.
TEST(RowKernelPlan, WideRowsHoldUpTo32768ValuesInOneCta) {
  struct Pair { RowFamily family; int elem; };
  for (const Pair p : {Pair{RowFamily::kRmsNormForward, 2}, Pair{RowFamily::kRmsNormForward, 4},
                       Pair{RowFamily::kRmsNormBiasForward, 2}, Pair{RowFamily::kRmsNormBiasForward, 4}}) {
    const RowFamily family = p.family;
    const int elem = p.elem;
    const int vec = 16 / elem;
    for (const int64_t n : {int64_t(16392), int64_t(20001), int64_t(24576), int64_t(32768)}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem);
      const RowKernelConfig c = plan_on_h200(family, n, elem, 1);
      ASSERT_EQ(c.kind, RowKernelKind::kWide);
      // float32 rms_norm fills 1024-thread CTAs (wide_fill_above_threads), with a bias or not
      const bool filled = elem == 4;
      const int64_t vectors = (n + vec - 1) / vec;
      EXPECT_EQ(c.vpt, filled ? (vectors + kWideRowThreads - 1) / kWideRowThreads : kWideTileValues / vec);
      EXPECT_EQ(c.threads % 32, 0);
      EXPECT_LE(c.threads, kWideRowThreads);
      EXPECT_GE(c.capacity(), n);
      EXPECT_LT(c.capacity() - n, 32 * kWideTileValues) << "no warp of padding only";
      EXPECT_EQ(c.cluster, 1);
      EXPECT_EQ(c.smem_bytes, 0u);
      EXPECT_NE(c.wide_form, WideForm::kLean) << "rms_norm's kernel is one-statistic";
      // 16-bit: the middle form to 768 threads; past it the 32-register form, but whole rows with
      // a bias the roomy one. float32: the 32-register form.
      const bool whole = n % kWideTileValues == 0;
      const bool mid = elem == 2 && c.threads <= kWideMidRowThreads;
      const bool roomy = family == RowFamily::kRmsNormBiasForward && elem == 2 && whole && !mid;
      EXPECT_EQ(c.wide_form, mid ? WideForm::kMid : roomy ? WideForm::kRoomy : WideForm::kBase);
    }
    const bool bias16 = family == RowFamily::kRmsNormBiasForward && elem == 2;
    for (const int64_t n : {int64_t(elem == 2 ? 3072 : 16384), int64_t(32776), int64_t(65536)})
      EXPECT_NE(plan_on_h200(family, n, elem, 1).kind, RowKernelKind::kWide) << "n=" << n << " elem=" << elem;
    if (bias16) EXPECT_NE(plan_on_h200(family, 4064, elem, 1).kind, RowKernelKind::kWide) << "with a bias from 4065";
    if (elem == 2) EXPECT_EQ(plan_on_h200(family, 4096, elem, 1).kind, RowKernelKind::kWide) << "from 4096 values";
    RowKernelLimits off = policy_on_h200(family, elem);
    off.wide_rows = false;
    EXPECT_NE(plan_row_kernel(32768, elem, 1, off).kind, RowKernelKind::kWide) << "the knob off";
    RowKernelLimits merged = policy_on_h200(family, elem);
    merged.two_phase = false;
    EXPECT_NE(plan_row_kernel(32768, elem, 1, merged).kind, RowKernelKind::kWide) << "their kernels are two-phase";
  }
  for (const RowFamily family : {RowFamily::kRmsNormForward, RowFamily::kRmsNormBiasForward}) {
    for (const int elem : {2, 4})
      EXPECT_EQ(plan_on_h200(family, 32767, elem, 1).kind, RowKernelKind::kStaged) << "ragged, banded";
    // 16-bit rms_norm from 12288 values (more than 384 threads), float32 from 16384.
    for (const int64_t n : {int64_t(12296), int64_t(12800), int64_t(14336), int64_t(16384)}) {
      const RowKernelConfig c = plan_on_h200(family, n, 2, 1);
      EXPECT_EQ(c.kind, RowKernelKind::kWide) << "n=" << n;
      // Up to 512 threads the 64-register kernel; with a bias ragged rows the 40-register one.
      const bool bias_ragged = family == RowFamily::kRmsNormBiasForward && n != int64_t(c.threads) * kWideTileValues;
      EXPECT_EQ(c.wide_form, bias_ragged ? WideForm::kMid : WideForm::kRoomy) << "n=" << n;
      EXPECT_NE(plan_on_h200(family, n, 4, 1).kind, RowKernelKind::kWide) << "float32, n=" << n;
    }
  }
  RowKernelLimits ragged_only = policy_on_h200(RowFamily::kRmsNormBiasForward, 2);
  ragged_only.wide_whole_roomy_max_threads = 0;
  EXPECT_EQ(plan_row_kernel(32768, 2, 1, ragged_only).wide_form, WideForm::kBase) << "the whole-row knob off";
  // The middle form: 513-768 threads, whole rows too, with or without a bias; never past 768
  // threads (the knob above it is capped) nor within the roomy band.
  for (const RowFamily family : {RowFamily::kRmsNormForward, RowFamily::kRmsNormBiasForward}) {
    RowKernelLimits mid = policy_on_h200(family, 2);
    for (const int64_t n : {int64_t(16416), int64_t(20000), int64_t(24576)}) {
      const RowKernelConfig c = plan_row_kernel(n, 2, 1, mid);
      EXPECT_EQ(c.wide_form, WideForm::kMid) << n << " values, " << c.threads << " threads";
    }
    EXPECT_EQ(plan_row_kernel(14336, 2, 1, mid).wide_form, WideForm::kRoomy) << "448 threads, whole";
    EXPECT_NE(plan_row_kernel(32768, 2, 1, mid).wide_form, WideForm::kMid) << "1024 threads";
    RowKernelLimits roomy = mid;
    roomy.wide_roomy_max_threads = 512;
    EXPECT_EQ(plan_row_kernel(12800, 2, 1, roomy).wide_form, WideForm::kRoomy) << "ragged 416 threads, roomy band";
    mid.wide_mid_max_threads = kWideRowThreads;
    EXPECT_NE(plan_row_kernel(24608, 2, 1, mid).wide_form, WideForm::kMid) << "769 threads, the knob past 768";
    mid.wide_mid_max_threads = 0;
    EXPECT_NE(plan_row_kernel(20000, 2, 1, mid).wide_form, WideForm::kMid) << "the knob off";
  }
  for (const int64_t n : {int64_t(16392), int64_t(20001), int64_t(32767), int64_t(32768)}) {
    const RowKernelConfig c = plan_on_h200(RowFamily::kLayerNormForward, n, 2, 1);
    EXPECT_NE(c.kind, RowKernelKind::kWide) << "16-bit layer_norm, n=" << n;
    EXPECT_GT(c.tiles, 1) << "16-bit layer_norm re-reads them, n=" << n;
  }
  EXPECT_NE(plan_on_h200(RowFamily::kLayerNormForward, 32768, 8, 1).kind, RowKernelKind::kWide) << "float64";
  EXPECT_NE(plan_on_h200(RowFamily::kRowwise, 32768, 4, 1).kind, RowKernelKind::kWide) << "softmax";
}

// 16-bit layer_norm: rows of whole vectors of 7168 < n <= 16384 values take wide rows of 225-512
// threads (read once), and so do whole rows (every thread's 32 values inside the row) of 1024-7168
// values; those of up to 416 threads (12800 values) the lean kernel but whole rows of up to 384
// threads (1024-12288); ragged lengths below 7169 and rows past 16384 do not, float32 never
// goes wide here (LayerNormFloat32WideRowsOf8KTo32K).
TEST(RowKernelPlan, LayerNormWideRowsAreWholeVectorsOf1KTo16K) {
  for (const int64_t n : {int64_t(8192), int64_t(8200), int64_t(10240), int64_t(12288), int64_t(12800), int64_t(14336),
                          int64_t(16000), int64_t(16384)}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const RowKernelConfig c = plan_on_h200(RowFamily::kLayerNormForward, n, 2, 1);
    ASSERT_EQ(c.kind, RowKernelKind::kWide);
    EXPECT_EQ(c.vpt * c.vec, kWideTileValues);
    EXPECT_GT(c.threads, 224);
    EXPECT_LE(c.threads, 512);
    EXPECT_GE(c.capacity(), n);
    EXPECT_LT(c.capacity() - n, 32 * kWideTileValues) << "no warp of padding only";
    const bool whole = n % kWideTileValues == 0 && n / kWideTileValues <= 384;
    EXPECT_EQ(c.wide_form == WideForm::kLean, n <= 12800 && !whole) << "whole rows of up to 384 threads: the full kernel";
  }
  for (const int64_t n : {int64_t(512), int64_t(1000), int64_t(1032), int64_t(3200), int64_t(4104), int64_t(6400),
                          int64_t(7160), int64_t(10241), int64_t(12801), int64_t(16392)})
    EXPECT_NE(plan_on_h200(RowFamily::kLayerNormForward, n, 2, 1).kind, RowKernelKind::kWide) << "n=" << n;
  for (const int threads : {32, 64, 96, 128, 160, 192, 224}) {
    const RowKernelConfig whole = plan_on_h200(RowFamily::kLayerNormForward, threads * kWideTileValues, 2, 1);
    EXPECT_EQ(whole.kind, RowKernelKind::kWide) << threads << " threads, whole";
    EXPECT_EQ(whole.threads, threads);
    EXPECT_NE(whole.wide_form, WideForm::kLean) << "a whole row: the full kernel";
  }
  RowKernelLimits ragged_band = policy_on_h200(RowFamily::kLayerNormForward, 2);
  ragged_band.wide_whole_above_threads = 0;
  EXPECT_NE(plan_row_kernel(7168, 2, 1, ragged_band).kind, RowKernelKind::kWide) << "the whole-row band off";
  EXPECT_NE(plan_row_kernel(4096, 2, 1, ragged_band).kind, RowKernelKind::kWide) << "the whole-row band off";
  RowKernelLimits off = policy_on_h200(RowFamily::kLayerNormForward, 2);
  off.wide_rows = false;
  EXPECT_NE(plan_row_kernel(10240, 2, 1, off).kind, RowKernelKind::kWide) << "the knob off";
  RowKernelLimits full = policy_on_h200(RowFamily::kLayerNormForward, 2);
  full.wide_lean_max_threads = 0;
  EXPECT_NE(plan_row_kernel(12800, 2, 1, full).wide_form, WideForm::kLean) << "the lean knob off";
  EXPECT_EQ(plan_on_h200(RowFamily::kLayerNormForward, 9208, 2, 1).wide_form, WideForm::kLean) << "288 threads, not whole";
  EXPECT_NE(plan_on_h200(RowFamily::kLayerNormForward, 9216, 2, 1).wide_form, WideForm::kLean) << "288 threads, whole";
  RowKernelLimits lean_whole = policy_on_h200(RowFamily::kLayerNormForward, 2);
  lean_whole.wide_whole_roomy_max_threads = 0;
  EXPECT_EQ(plan_row_kernel(10240, 2, 1, lean_whole).wide_form, WideForm::kLean) << "the whole-row knob off";
}

// float32 layer_norm: rows of whole vectors take wide rows of 32 values a thread, whole rows
// (threads x 32 values) of 225-1024 threads, the others of 257-512 threads; past 512 threads,
// 1024-thread CTAs of fewer values a thread (wide_fill_above_threads); always the 64-register
// packed kernel (no lean form). Ragged lengths, partial rows past 512 threads, rows one
// 512-thread CTA holds (up to 8192 values but the whole 8192) and rows past 32768 keep their plans.
TEST(RowKernelPlan, LayerNormFloat32WideRowsOf8KTo32K) {
  for (const int threads : {256, 320, 384, 512, 768, 1024}) {
    const RowKernelConfig c = plan_on_h200(RowFamily::kLayerNormForward, threads * kWideTileValues, 4, 1);
    ASSERT_EQ(c.kind, RowKernelKind::kWide) << threads << " threads, whole";
    EXPECT_EQ(c.threads, threads <= 512 ? threads : kWideRowThreads);
    EXPECT_EQ(c.threads * c.vpt * c.vec, threads * kWideTileValues) << "whole rows fill their CTA";
    EXPECT_EQ(c.wide_form, WideForm::kBase);
  }
  for (const int64_t n : {int64_t(8196), int64_t(9000), int64_t(12800), int64_t(16000), int64_t(16384)}) {
    const RowKernelConfig c = plan_on_h200(RowFamily::kLayerNormForward, n, 4, 1);
    ASSERT_EQ(c.kind, RowKernelKind::kWide) << "n=" << n;
    EXPECT_GT(c.threads, 256) << "n=" << n;
    EXPECT_LE(c.threads, 512) << "n=" << n;
    EXPECT_GE(c.capacity(), n);
    EXPECT_LT(c.capacity() - n, 32 * kWideTileValues) << "no warp of padding only";
    EXPECT_EQ(c.wide_form, WideForm::kBase);
  }
  for (const int64_t n : {int64_t(4096), int64_t(6144), int64_t(7168), int64_t(8000), int64_t(16400), int64_t(20000),
                          int64_t(30001), int64_t(12801), int64_t(32772), int64_t(65536)})
    EXPECT_NE(plan_on_h200(RowFamily::kLayerNormForward, n, 4, 1).kind, RowKernelKind::kWide) << "n=" << n;
  RowKernelLimits partial = policy_on_h200(RowFamily::kLayerNormForward, 4);
  partial.wide_partial_max_threads = 0;
  EXPECT_EQ(plan_row_kernel(20000, 4, 1, partial).kind, RowKernelKind::kWide) << "640 threads, the partial cap off";
  RowKernelLimits off = policy_on_h200(RowFamily::kLayerNormForward, 4);
  off.wide_rows = false;
  EXPECT_NE(plan_row_kernel(32768, 4, 1, off).kind, RowKernelKind::kWide) << "the knob off";
}

// The fused residual norms hold s = x + residual on the wide rows (HoldsInputSum): two-input rows
// of whole vectors with one-input geometry (32 values of s a thread). 16-bit rows of both ops from
// 1024 values (whole to 1024 threads, others to 512), add_rms_norm's on the 64-register form;
// float32 rows of add_layer_norm past 256 threads, of add_rms_norm past 416 (its own on the
// 64-register form), whole to 1024, others to 896 (7 vectors a thread), past 512 threads on
// 1024-thread CTAs filled at 5-8 vectors a thread. Ragged lengths, float64 and the knobs off: no.
TEST(RowKernelPlan, ResidualWideRowsHoldTheSum) {
  struct Want { RowFamily family; int64_t n; int elem, threads, values = kWideTileValues; };
  constexpr RowFamily kLayer = RowFamily::kResidualLayerNormForward, kRms = RowFamily::kResidualRmsNormForward;
  for (const Want& w : {Want{kLayer, 1024, 2, 32}, Want{kRms, 4096, 2, 128}, Want{kLayer, 8200, 2, 288},
                        Want{kRms, 16384, 2, 512}, Want{kLayer, 32768, 4, 1024}, Want{kLayer, 12800, 4, 416},
                        Want{kLayer, 8224, 4, 288}, Want{kLayer, 32768, 2, 1024}, Want{kRms, 24576, 2, 768},
                        Want{kRms, 32768, 4, 1024}, Want{kRms, 16384, 4, 512}, Want{kLayer, 20000, 4, 1024, 20},
                        Want{kRms, 18000, 4, 928, 20}, Want{kRms, 24576, 4, 1024, 24}, Want{kLayer, 28000, 4, 1024, 28}}) {
    SCOPED_TRACE(testing::Message() << "family " << static_cast<int>(w.family) << " n=" << w.n << " elem=" << w.elem);
    const RowKernelConfig c = plan_on_h200(w.family, w.n, w.elem, 2);
    ASSERT_EQ(c.kind, RowKernelKind::kWide);
    EXPECT_EQ(c.threads, w.threads);
    EXPECT_EQ(c.vpt * c.vec, w.values) << "one input's tile: s";
    EXPECT_EQ(c.wide_form, w.family == kRms ? WideForm::kRoomy : WideForm::kBase);
  }
  for (const Want& w : {Want{kLayer, 8192, 4, 0}, Want{kLayer, 30000, 4, 0}, Want{kLayer, 16392, 2, 0},
                        Want{kRms, 6400, 2, 0}, Want{kLayer, 40008, 2, 0}, Want{kLayer, 12801, 4, 0},
                        Want{kLayer, 32768, 8, 0}, Want{kRms, 8192, 4, 0}, Want{kRms, 12800, 4, 0}, Want{kRms, 30000, 4, 0},
                        Want{kRms, 16448, 2, 0}, Want{kRms, 65536, 2, 0}})
    EXPECT_NE(plan_on_h200(w.family, w.n, w.elem, 2).kind, RowKernelKind::kWide)
        << "family " << static_cast<int>(w.family) << " n=" << w.n << " elem=" << w.elem;
  RowKernelLimits no_sums = policy_on_h200(kLayer, 4);
  no_sums.wide_input_sums = false;
  EXPECT_NE(plan_row_kernel(32768, 4, 2, no_sums).kind, RowKernelKind::kWide) << "two inputs, no held sum";
}

// Small re-read tiles: one 16-byte vector a thread (4 words in float32, 8 in 16-bit or with two
// float32 inputs), 512 threads, as many tiles as the row needs; by default for rows of 64 KiB.
TEST(RowKernelPlan, RereadSmallTilesHoldOneVectorAThread) {
  RowKernelLimits limits = h200_limits();
  limits.reread_above_words = 4;
  limits.reread_small_tiles_from_bytes = 0;
  struct Want { int64_t n; int elem, inputs, tiles; };
  for (const Want& w : {Want{8192, 4, 1, 4}, Want{8192, 2, 1, 2}, Want{8192, 4, 2, 4}, Want{8192, 8, 1, 8},
                        Want{40009, 4, 1, 20}, Want{4096, 4, 1, 2}}) {
    SCOPED_TRACE(testing::Message() << "n=" << w.n << " elem=" << w.elem << " inputs=" << w.inputs);
    const RowKernelConfig c = plan_row_kernel(w.n, w.elem, w.inputs, limits);
    EXPECT_EQ(c.kind, RowKernelKind::kBlock);
    EXPECT_EQ(c.vpt, 1);
    EXPECT_EQ(c.threads, 512);
    EXPECT_EQ(c.cluster, 1);
    EXPECT_EQ(c.stash_tiles, 0);
    EXPECT_EQ(c.tiles, w.tiles);
    EXPECT_GE(c.capacity(), w.n);
  }
  const RowKernelConfig one_tile = plan_row_kernel(2048, 4, 1, limits);
  EXPECT_EQ(one_tile.tiles, 1);
  EXPECT_EQ(one_tile.vpt, 1);
  EXPECT_EQ(one_tile.threads, 512) << "2048 floats: 512 vectors, a thread each";
  const RowKernelConfig trimmed = plan_row_kernel(1000, 4, 1, limits);
  EXPECT_EQ(trimmed.tiles, 1);
  EXPECT_EQ(trimmed.threads, 256) << "250 vectors: whole warps, none of padding only";
  limits.reread_above_words = 16;
  limits.block_elems = 16;  // as float32 layer_norm plans: 512 threads x 16 values at 8192
  EXPECT_EQ(plan_row_kernel(8192, 4, 1, limits).vpt, 4) << "16-word tiles stay held";
  EXPECT_EQ(plan_row_kernel(8192, 4, 1, limits).tiles, 1);

  RowKernelLimits shipped = h200_limits();
  shipped.reread_above_words = 16;
  const auto tile_words = [&](int64_t n, int elem) {
    const RowKernelConfig c = plan_row_kernel(n, elem, 1, shipped);
    EXPECT_GT(c.tiles, 1) << "n=" << n << " re-reads";
    return c.vpt * c.vec * (elem == 8 ? 2 : 1);
  };
  EXPECT_EQ(tile_words(12800, 4), 16) << "50 KB rows keep 16-word tiles";
  EXPECT_EQ(tile_words(32768, 4), 4);
  EXPECT_EQ(tile_words(32767, 2), 16) << "one element short of 64 KiB";
  EXPECT_EQ(tile_words(32768, 2), 8) << "16-bit: one 8-element vector";

  // float32 layer_norm: small tiles also where the last 16-word tile would be under half full
  // (the plans of its re-read rows; those of whole vectors take the wide rows by default).
  RowKernelLimits ln = policy_on_h200(RowFamily::kLayerNormForward, 4);
  ln.wide_rows = false;
  ln.staged = {};
  struct Short { int64_t n; int vpt, tiles; };
  for (const Short& w : {Short{10240, 1, 5}, Short{12800, 4, 2}, Short{16000, 4, 2}, Short{9000, 1, 5},
                         Short{14336, 4, 2}, Short{40958, 1, 20}}) {
    const RowKernelConfig c = plan_row_kernel(w.n, 4, 1, ln);
    EXPECT_EQ(c.vpt, w.vpt) << "n=" << w.n;
    EXPECT_EQ(c.tiles, w.tiles) << "n=" << w.n;
  }
  EXPECT_FALSE(row_policy(RowFamily::kLayerNormForward, 2).reread_small_tiles_for_short_last);
  EXPECT_FALSE(row_policy(RowFamily::kRowwise, 4).reread_small_tiles_for_short_last);

  // float32 layer_norm parks three 4-word tiles of its re-read rows (32 KiB budget); the
  // 16-word tiles (32 KiB and more each) none.
  for (int64_t n : {16384, 24576, 32768, 50257, 262143}) {
    const RowKernelConfig c = plan_row_kernel(n, 4, 1, ln);
    EXPECT_EQ(c.stash_tiles, 3) << "n=" << n;
    EXPECT_EQ(c.smem_bytes, 3u * 513 * 16) << "n=" << n;
  }
  EXPECT_EQ(plan_row_kernel(12288, 4, 1, ln).stash_tiles, 0);
  for (int64_t n : {16400, 20000})
    EXPECT_EQ(plan_on_h200(RowFamily::kLayerNormForward, n, 4, 1).stash_tiles, 3) << "shipped, n=" << n;

  // loads_ahead (layer_norm's) reaches re-read plans only.
  EXPECT_EQ(ln.loads_ahead, 2);
  EXPECT_EQ(plan_row_kernel(10240, 4, 1, ln).loads_ahead, 2);
  EXPECT_EQ(plan_row_kernel(4096, 4, 1, ln).loads_ahead, 0) << "one-CTA rows keep their plan";
  for (const RowFamily family : {RowFamily::kRowwise, RowFamily::kRmsNormForward, RowFamily::kRmsNormBiasForward,
                                 RowFamily::kResidualLayerNormForward, RowFamily::kResidualRmsNormForward,
                                 RowFamily::kNormBackward})
    EXPECT_EQ(row_policy(family, 4).loads_ahead, 0);
  EXPECT_EQ(row_policy(RowFamily::kLayerNormForward, 2).loads_ahead, 1) << "16-bit: groups of two tiles";
  EXPECT_EQ(row_policy(RowFamily::kLayerNormForward, 8).loads_ahead, 0);
}

// Norm forwards re-read their rows even with a workspace (reread_over_split); rows over
// kRereadMaxRowBytes keep their split plan.
TEST(RowKernelPlan, RereadOverSplitDropsTheSplitPlanOfRereadRowsOnly) {
  RowKernelLimits limits = RowKernelLimits{};
  limits.sm_count = 132;
  limits.max_smem_per_block = 227 * 1024 - 2048;
  limits.reread_above_words = kRereadPastOneCta;
  EXPECT_GT(plan_row_kernel(262144, 2, 1, limits).split.chunks, 0) << "softmax's rows keep both plans";
  limits.reread_over_split = true;
  const RowKernelConfig reread = plan_row_kernel(262144, 2, 1, limits);
  EXPECT_GT(reread.tiles, 1);
  EXPECT_EQ(reread.split.chunks, 0);
  EXPECT_GT(plan_row_kernel(1 << 20, 2, 1, limits).split.chunks, 0) << "2 MiB rows are not re-read";
  EXPECT_GT(plan_row_kernel(1 << 19, 2, 2, limits).split.chunks, 0) << "nor 1 MiB rows of two inputs";
}

// Re-read rows park all their tiles but the last in shared memory, as many as the stash budget
// and kMaxBulkStashTiles allow, each tile in a buffer of one granule more a slot; everything
// else about the plan stays as without a stash, and rows that do not re-read park nothing new.
TEST(RowKernelPlan, RereadRowsParkTilesUpToTheStashBudget) {
  RowKernelLimits parked = h200_limits();
  parked.reread_above_words = kRereadPastOneCta;
  parked.reread_stash_bytes = kRereadStashBytes;
  RowKernelLimits unparked = parked;
  unparked.reread_stash_bytes = 0;
  for (int elem : {2, 4, 8}) {
    for (int inputs : {1, 2}) {
      for (int64_t n : row_lengths()) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " inputs=" << inputs);
        const RowKernelConfig u = plan_row_kernel(n, elem, inputs, unparked);
        const RowKernelConfig c = plan_row_kernel(n, elem, inputs, parked);
        const bool reread = u.kind == RowKernelKind::kBlock && u.cluster == 1 && u.tiles > 1;
        if (!reread) {
          expect_same_layout(c, u);
          continue;
        }
        EXPECT_EQ(c.vpt, u.vpt);
        EXPECT_EQ(c.threads, u.threads);
        EXPECT_EQ(c.tiles, u.tiles);
        EXPECT_EQ(c.cluster, 1);
        EXPECT_EQ(u.stash_tiles, 0);
        const std::size_t tile = std::size_t(inputs) * c.vpt * (c.threads + 1) * 16;
        EXPECT_EQ(c.stash_tiles, std::min<int64_t>({c.tiles - 1, int64_t(kRereadStashBytes / tile), 32}));
        EXPECT_EQ(c.smem_bytes, c.stash_tiles * tile);
        EXPECT_LE(c.smem_bytes, kRereadStashBytes);
      }
    }
  }
  const RowKernelConfig vocab = plan_row_kernel(50257, 2, 1, parked);
  EXPECT_EQ(vocab.tiles, 13) << "6283 vectors, 512 a tile";
  EXPECT_EQ(vocab.stash_tiles, 12) << "the whole row but its last tile";
  EXPECT_EQ(plan_row_kernel(262144, 2, 1, parked).stash_tiles, 13) << "64 tiles: the budget's 13 parked";
}

TEST(RowKernelPlan, SplitWorkspaceGrowsWithRowsChunkSizeDoesNot) {
  const RowKernelLimits limits = h200_limits();
  const RowKernelConfig c = plan_row_kernel(1 << 20, 4, 1, limits);
  for (int64_t rows : {1, 3, 16, 1000}) {
    const RowSplitWorkspace w = row_split_workspace(c, rows, 8);
    EXPECT_EQ(w.zeroed_bytes, std::size_t((rows * 4 + 15) / 16 * 16)) << "one counter a row, 16-byte aligned";
    EXPECT_EQ(w.bytes, w.zeroed_bytes + std::size_t(rows) * 64 * 8);
  }
  EXPECT_EQ(row_split_workspace(c, 0, 8).bytes, 0u);
  EXPECT_EQ(row_split_workspace(plan_row_kernel(4096, 4, 1, limits), 16, 8).bytes, 0u) << "no split, no workspace";
}

// ---- the tiles built (row_tiles) ---------------------------------------------------------

// The kernels whose tiles row_tiles lists, as the launcher (row_launch.cuh) picks them; staged
// and streamed rows (tiles > 1) have all their kernels built.
enum class TiledKernel { kWarp, kRing, kBlock, kCluster, kWide, kNone };

TiledKernel tiled_kernel(const RowKernelConfig& c, int elem) {
  if (c.kind == RowKernelKind::kWarp) return TiledKernel::kWarp;
  if (c.kind == RowKernelKind::kWide) return TiledKernel::kWide;
  if (c.kind == RowKernelKind::kStaged || c.tiles > 1) return TiledKernel::kNone;
  if (elem < 4 && c.ring > 0) return TiledKernel::kRing;
  return c.cluster > 1 ? TiledKernel::kCluster : TiledKernel::kBlock;
}

unsigned tiles_of(const RowTiles& t, TiledKernel k) {
  switch (k) {
    case TiledKernel::kWarp: return t.warp;
    case TiledKernel::kRing: return t.ring;
    case TiledKernel::kBlock: return t.block;
    case TiledKernel::kWide: return t.wide;
    default: return t.cluster;
  }
}

const char* kernel_name(TiledKernel k) {
  const char* const names[] = {"warp", "ring", "block", "cluster block", "wide row"};
  return names[static_cast<int>(k)];
}

void add_tile(RowTiles* t, TiledKernel k, int vpt) {
  unsigned* sets[] = {&t->warp, &t->ring, &t->block, &t->cluster, &t->wide};
  *sets[static_cast<int>(k)] |= row_vpt_bit(vpt);
}

// Every length up to 2^16, then a spread up to 2^20 (longer rows of every dtype are streamed or
// staged), then lengths about powers of two and an odd spread up to kMaxRowLength.
std::vector<int64_t> every_row_length() {
  std::vector<int64_t> n;
  for (int64_t c = 1; c <= (1 << 16); ++c) n.push_back(c);
  for (int64_t c = (1 << 16) + 1; c <= (1 << 18); c += 3) n.push_back(c);
  for (int64_t c = (1 << 18) + 1; c <= (1 << 20); c += 13) n.push_back(c);
  for (int e = 20; e <= 30; ++e)
    for (int64_t d = -3; d <= 3; ++d) n.push_back((int64_t(1) << e) + d);
  for (int64_t c = (1 << 20) + 7; c <= kMaxRowLength; c += 1000003 * 7) n.push_back(c);
  return n;
}

// The limits plans are made with: the shipped policy on devices of 227, 163 and 99 KB of shared
// memory a CTA, and on an H200 the overrides the GPU tests set (RereadRows, the split tests,
// the parked re-read rows, the Python override test's max_cluster, the wide rows off).
std::vector<RowKernelLimits> limits_planned(RowFamily family, int elem) {
  std::vector<RowKernelLimits> out;
  for (const int smem_kb : {227, 163, 99}) {
    RowKernelLimits l = row_policy(family, elem);
    l.sm_count = 132;
    l.max_smem_per_block = std::size_t(smem_kb) * 1024 - 2048;
    l.max_smem_per_sm = std::size_t(smem_kb + 1) * 1024;
    out.push_back(l);
  }
  const RowKernelLimits h200 = out[0];
  for (const int64_t small : {int64_t(1) << 30, int64_t(0)}) {
    RowKernelLimits l = h200;
    l.reread_above_words = 16;
    l.reread_small_tiles_from_bytes = small;
    out.push_back(l);
  }
  out.push_back(h200);
  out.back().split_max_elem_bytes = 8;
  for (const std::size_t stash : {std::size_t(0), kRereadStashBytes}) {
    out.push_back(h200);
    out.back().reread_stash_bytes = stash;
  }
  out.push_back(h200);
  out.back().max_cluster = 1;
  out.push_back(h200);
  out.back().wide_rows = false;  // the plans of before the wide rows, for same-build comparisons
  if (h200.wide_fill_above_threads > 0) {  // float32 wide rows of 32 values a thread, as before
    out.push_back(h200);
    out.back().wide_fill_above_threads = 0;
  }
  return out;
}

std::string tile_list(unsigned set) {
  std::string s;
  for (int v = 1; v <= 16; ++v)
    if (has_row_vpt(set, v)) s += (s.empty() ? "" : ",") + std::to_string(v);
  return "{" + s + "}";
}

// row_tiles is exactly what the plans reach: no plan names a kernel that is not built (its launch
// would fail), and no built kernel is left that no plan names (compile time for nothing).
TEST(RowKernelPlan, RowTilesAreExactlyThePlannedTiles) {
  struct Family {
    RowFamily family;
    int inputs;
    const char* name;
  };
  const Family families[] = {{RowFamily::kRowwise, 1, "softmax"},
                             {RowFamily::kRowwise, 2, "softmax backward"},
                             {RowFamily::kLayerNormForward, 1, "layer_norm"},
                             {RowFamily::kRmsNormForward, 1, "rms_norm"},
                             {RowFamily::kRmsNormBiasForward, 1, "rms_norm with a bias"},
                             {RowFamily::kResidualLayerNormForward, 2, "add_layer_norm"},
                             {RowFamily::kResidualRmsNormForward, 2, "add_rms_norm"},
                             {RowFamily::kNormBackward, 2, "norm backward"}};
  const std::vector<int64_t> lengths = every_row_length();
  for (const Family& f : families) {
    for (int elem : {2, 4, 8}) {
      SCOPED_TRACE(testing::Message() << f.name << " elem=" << elem);
      RowTiles planned;
      const RowTiles built = row_tiles(f.family, elem, f.inputs);
      for (const RowKernelLimits& limits : limits_planned(f.family, elem)) {
        for (int64_t n : lengths) {
          // Norm backward rows the fused kernel takes never reach the row engine.
          if (f.family == RowFamily::kNormBackward && plan_fused_norm_backward(n, elem, fused_max_vpt(elem)).fused)
            continue;
          const RowKernelConfig c = plan_row_kernel(n, elem, f.inputs, limits);
          const TiledKernel k = tiled_kernel(c, elem);
          if (k == TiledKernel::kNone) continue;
          const int vpt = k == TiledKernel::kWarp ? std::min(c.vpt, 4) : c.vpt;
          if (!has_row_vpt(tiles_of(planned, k), vpt))
            EXPECT_TRUE(has_row_vpt(tiles_of(built, k), vpt))
                << "n=" << n << ": a " << kernel_name(k) << " kernel of " << vpt << " vectors a thread, not built";
          add_tile(&planned, k, vpt);
        }
      }
      EXPECT_EQ(tile_list(planned.warp), tile_list(built.warp)) << "warp";
      EXPECT_EQ(tile_list(planned.ring), tile_list(built.ring)) << "ring";
      EXPECT_EQ(tile_list(planned.block), tile_list(built.block)) << "block";
      EXPECT_EQ(tile_list(planned.cluster), tile_list(built.cluster)) << "cluster";
      EXPECT_EQ(tile_list(planned.wide), tile_list(built.wide)) << "wide";
    }
  }
}

// Norm backward rows the row engine takes are never warp rows or one-vector tiles, whatever the
// fused kernel's tile cap (the norm_bwd_max_vpt override): the fused kernel takes every row that
// short, so row_tiles builds none for them.
TEST(RowKernelPlan, NormBackwardRowsOfTheRowEngineAreLong) {
  for (int elem : {2, 4, 8}) {
    for (int max_vpt = 1; max_vpt <= fused_max_vpt(elem); ++max_vpt) {
      RowKernelLimits limits = row_policy(RowFamily::kNormBackward, elem);
      limits.min_block_threads = 32;
      limits.block_elems = 1;  // as many threads as the row fills: the smallest tiles
      for (int64_t n = 1; n <= 20000; ++n) {
        if (plan_fused_norm_backward(n, elem, max_vpt).fused) continue;
        for (const int reread : {0, 1}) {  // none, or every row past a warp's re-read on small tiles
          for (const int64_t small : {int64_t(0), int64_t(1) << 30}) {
            limits.reread_above_words = reread;
            limits.reread_small_tiles_from_bytes = small;
            const RowKernelConfig c = plan_row_kernel(n, elem, 2, limits);
            ASSERT_NE(c.kind, RowKernelKind::kWarp) << "n=" << n << " elem=" << elem << " max_vpt=" << max_vpt;
            if (c.tiles == 1) ASSERT_GE(c.vpt, 2) << "n=" << n << " elem=" << elem << " max_vpt=" << max_vpt;
          }
        }
      }
    }
  }
}

// The lengths NormGpu.RingRowsOf48KiBLaunch runs: 16-bit rows on a two-row ring of exactly
// 48 KiB, which with the kernels' static slots needs the shared-memory opt-in.
TEST(RowKernelPlan, RingRowsOf48KiB) {
  const struct { RowFamily family; int64_t n; int inputs; } rows[] = {
      {RowFamily::kResidualLayerNormForward, 6144, 2},
      {RowFamily::kResidualRmsNormForward, 5700, 2},
      {RowFamily::kNormBackward, 6144, 2},
  };
  for (const auto& r : rows) {
    RowKernelLimits limits = policy_on_h200(r.family, 2);
    limits.wide_rows = false;  // the residual rows' default plan is wide (ResidualWideRowsHoldTheSum)
    const RowKernelConfig c = plan_row_kernel(r.n, 2, r.inputs, limits);
    EXPECT_EQ(c.kind, RowKernelKind::kBlock) << r.n;
    EXPECT_EQ(c.ring, 2) << r.n;
    EXPECT_EQ(c.smem_bytes, std::size_t(48 * 1024)) << r.n;
  }
}

// wide_fill_above_threads: float32 wide rows whose 32-value CTA would pass 512 threads run on
// 1024-thread CTAs at fewer vectors a thread, as a function of the length alone; others, 16-bit
// rows and the knob off keep 32 values a thread.
TEST(RowKernelPlan, FilledWideRowsTakeEveryThread) {
  constexpr RowFamily kLayer = RowFamily::kLayerNormForward, kAddLayer = RowFamily::kResidualLayerNormForward;
  RowKernelLimits layer = policy_on_h200(kLayer, 4), add_layer = policy_on_h200(kAddLayer, 4);
  struct Want { int64_t n; int threads, vpt; };
  for (const Want& w : {Want{20480, 1024, 5}, Want{24576, 1024, 6}, Want{28672, 1024, 7}, Want{32768, 1024, 8},
                        Want{16384, 512, 8}, Want{12800, 416, 8}}) {
    for (int inputs : {1, 2}) {
      const RowKernelConfig c = plan_row_kernel(w.n, 4, inputs, inputs == 1 ? layer : add_layer);
      SCOPED_TRACE(testing::Message() << "n=" << w.n << " inputs=" << inputs);
      ASSERT_EQ(c.kind, RowKernelKind::kWide);
      EXPECT_EQ(c.threads, w.threads);
      EXPECT_EQ(c.vpt, w.vpt);
      EXPECT_GE(int64_t(c.threads) * c.vpt * c.vec, w.n);
    }
  }
  RowKernelLimits narrow = policy_on_h200(kAddLayer, 2);
  narrow.wide_fill_above_threads = 512;
  const RowKernelConfig n16 = plan_row_kernel(24576, 2, 2, narrow);
  ASSERT_EQ(n16.kind, RowKernelKind::kWide);
  EXPECT_EQ(n16.threads, 768) << "16-bit rows keep 32 values a thread";
  layer.wide_fill_above_threads = 0;
  EXPECT_EQ(plan_row_kernel(24576, 4, 1, layer).threads, 768) << "the knob off";
}

// ---- randomized properties: what the launchers and kernels take from any plan ---------------

// The kernels' own bounds, restated: row_engine.cuh (kMaxBlockThreads) and sm_90's largest
// (non-portable) cluster. The staged share's mbarriers are the plan header's kStagedMaxChunks.
constexpr int kBlockKernelMaxThreads = 512;
constexpr int kHardwareMaxCluster = 16;

struct RandomFamily {
  RowFamily family;
  int inputs;
  bool cross_entropy;  // the kRowwise policy with cross_entropy_staged_bands (cross_entropy.cu)
  bool step;
  const char* name;
};

// Every op family the planner takes, as its callers plan them (rowwise_op.cuh, norm_launch.cuh,
// norm_backward_launch.cuh, cross_entropy.cu's plan_staged).
const RandomFamily kRandomFamilies[] = {
    {RowFamily::kRowwise, 1, false, false, "softmax"},
    {RowFamily::kRowwise, 2, false, false, "softmax backward"},
    {RowFamily::kLayerNormForward, 1, false, false, "layer_norm"},
    {RowFamily::kRmsNormForward, 1, false, false, "rms_norm"},
    {RowFamily::kRmsNormBiasForward, 1, false, false, "rms_norm with a bias"},
    {RowFamily::kResidualLayerNormForward, 2, false, false, "add_layer_norm"},
    {RowFamily::kResidualRmsNormForward, 2, false, false, "add_rms_norm"},
    {RowFamily::kNormBackward, 2, false, false, "norm backward"},
    {RowFamily::kRowwise, 1, true, false, "cross_entropy"},
    {RowFamily::kRowwise, 1, true, true, "cross_entropy step"},
};

// A row length in 1 .. kMaxRowLength (the callers reject longer rows before planning):
// log-uniform, short, about a power of two, or at the top of the range.
int64_t random_row_length(std::mt19937_64& rng) {
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  switch (uniform(0, 3)) {
    case 0: {
      const int e = static_cast<int>(uniform(0, 29));
      return uniform(int64_t(1) << e, (int64_t(2) << e) - 1);
    }
    case 1: return uniform(1, 1 << 16);
    case 2: return std::clamp((int64_t(1) << uniform(4, 30)) * uniform(1, 3) / 2 + uniform(-17, 17), int64_t(1),
                              kMaxRowLength);
    default: return kMaxRowLength - uniform(0, 1 << 12);
  }
}

// The limits row_kernel_limits gives on a device: an H200, an A100's shared memory, an sm_89's,
// anything between, or a device with more than the staged kernels' barriers cover, on 1..160
// SMs; the max_cluster override now and then (16 is the default).
RowKernelLimits random_device_limits(RowKernelLimits limits, std::mt19937_64& rng) {
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int optin_kb[] = {227, 227, 163, 99, uniform(99, 227), uniform(228, 512)};
  const int kb = optin_kb[uniform(0, 5)];
  limits.max_smem_per_block = std::size_t(kb) * 1024 - 2048;  // row_kernel_limits keeps 2 KB
  limits.max_smem_per_sm = std::size_t(kb + 1) * 1024;
  const int sms[] = {132, 132, 108, 84, uniform(1, 160)};
  limits.sm_count = sms[uniform(0, 4)];
  const int clusters[] = {16, 16, 16, 8, 1};
  limits.max_cluster = clusters[uniform(0, 4)];
  return limits;
}

std::string describe(const RowKernelConfig& c) {
  return testing::PrintToString(std::vector<int64_t>{static_cast<int>(c.kind), c.vec, c.vpt, c.lanes, c.threads,
                                                     c.cluster, c.tiles, c.stash_tiles, c.ring,
                                                     static_cast<int64_t>(c.smem_bytes), c.split.chunks,
                                                     c.split.chunk_tiles, c.split.vpt, c.split.grid, c.split.reread}) +
         " (kind vec vpt lanes threads cluster tiles stash ring smem | chunks chunk_tiles vpt grid reread)";
}

// Every plan of a random row, family, dtype and device is one the launchers run as planned:
// each value of the row in some thread's slot, in-row indices within int, a kernel built for its
// tile, CTAs, clusters and shared memory within what the launch and the device take.
TEST(RowKernelPlanRandom, EveryPlanFitsTheKernelItNames) {
  std::mt19937_64 rng(20240611);
  int kinds[4] = {};
  int splits = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const RandomFamily& f = kRandomFamilies[rng() % (sizeof(kRandomFamilies) / sizeof(kRandomFamilies[0]))];
    const int elem = f.cross_entropy ? 2 + 2 * static_cast<int>(rng() % 2) : 2 << (rng() % 3);
    const int64_t n = random_row_length(rng);
    // Norm backward rows the fused kernel takes never reach the row engine.
    if (f.family == RowFamily::kNormBackward && plan_fused_norm_backward(n, elem, fused_max_vpt(elem)).fused) continue;
    RowKernelLimits policy = row_policy(f.family, elem);
    if (f.cross_entropy) policy.staged = cross_entropy_staged_bands(f.step);
    const RowKernelLimits limits = random_device_limits(policy, rng);
    const RowKernelConfig c = plan_row_kernel(n, elem, f.inputs, limits);
    // The cross-entropy launches only staged plans; its other rows run its own row kernels.
    if (f.cross_entropy && c.kind != RowKernelKind::kStaged) continue;
    SCOPED_TRACE(testing::Message() << f.name << " n=" << n << " elem=" << elem << " smem/CTA="
                                    << limits.max_smem_per_block << " sms=" << limits.sm_count
                                    << " max_cluster=" << limits.max_cluster << " plan " << describe(c));
    ++kinds[static_cast<int>(c.kind)];
    const RowTiles built = row_tiles(f.family, elem, f.inputs);
    const int vec = 16 / elem;
    const int acc_words = elem == 8 ? 2 : 1;
    const int max_vpt = kRowTileWords / (vec * acc_words * f.inputs);  // the launcher's kMaxVpt
    const int64_t vectors = (n + vec - 1) / vec;
    ASSERT_EQ(c.vec, vec) << "kernels take 16-byte vectors";
    // No value dropped: the row's threads' slots reach past its last element.
    ASSERT_GE(c.capacity(), n);
    // The kernels index a row's elements as int ((first + k * step) * VEC).
    ASSERT_LE(c.capacity(), int64_t(INT32_MAX));
    ASSERT_LE(c.smem_bytes, limits.max_smem_per_block) << "dynamic shared memory past the device's";
    switch (c.kind) {
      case RowKernelKind::kWarp:
        // pick_warp_kernel: 4..32 lanes (a power of two) of one vector, or 32 lanes of 2 or 4.
        ASSERT_TRUE(c.lanes == 4 || c.lanes == 8 || c.lanes == 16 || c.lanes == 32);
        ASSERT_TRUE(c.vpt == 1 || c.vpt == 2 || c.vpt == 4);
        ASSERT_TRUE(c.vpt == 1 || c.lanes == 32) << "multi-vector warp kernels are built for 32 lanes";
        ASSERT_TRUE(has_row_vpt(built.warp, c.vpt)) << "no warp kernel built";
        break;
      case RowKernelKind::kStaged: {
        // row_staged_kernel (softmax forwards, 16-bit rows and float32 rows of ragged length: 256
        // or 512 threads), norm_staged_kernel (the plain rms_norm and layer_norm forwards: 512),
        // cross_entropy_staged_kernel (256 or 512).
        const bool norm = f.family == RowFamily::kRmsNormForward || f.family == RowFamily::kRmsNormBiasForward ||
                         f.family == RowFamily::kLayerNormForward;
        const bool softmax_rows = elem == 2 || (elem == 4 && n % vec != 0);
        ASSERT_EQ(f.inputs, 1);
        ASSERT_TRUE((f.family == RowFamily::kRowwise && (softmax_rows || f.cross_entropy)) || (norm && elem <= 4))
            << "no staged kernel for this family";
        ASSERT_TRUE(c.threads == kStagedThreads || (!norm && c.threads == kStagedSmallThreads));
        ASSERT_GE(c.cluster, 1);
        ASSERT_LE(c.cluster, std::min(kPortableClusterSize, limits.max_cluster));
        // stage_share: CTA r holds vectors [r P, r P + P) and mirror slots up to P + 3 past its first.
        const int64_t share = (vectors + c.cluster - 1) / c.cluster;
        ASSERT_GE(c.smem_bytes, staged_share_smem_bytes(share));
        ASSERT_LE((share + 3 + kStagedChunkGranules - 1) / kStagedChunkGranules, kStagedMaxChunks)
            << "more bulk copies than the kernel has mbarriers";
        break;
      }
      case RowKernelKind::kWide: {
        const bool sums = is_residual_family(f.family);  // kernels::HoldsInputSum: the tile holds x + residual
        ASSERT_TRUE(has_row_vpt(built.wide, c.vpt)) << "no wide kernel built";
        ASSERT_LE(c.vpt * vec * (sums ? 1 : f.inputs), kWideTileValues) << "past the launcher's kWideMaxVpt";
        ASSERT_EQ(c.cluster, 1);
        ASSERT_LE(c.threads, kWideRowThreads);
        ASSERT_EQ(c.threads % 32, 0);
        ASSERT_EQ(c.tiles, 1);
        // The packed kernels (aligned rows of whole vectors) have only some forms: the float32
        // two-phase one no lean form, the float32 one-statistic one only the roomy form, and the
        // middle form is built for CTAs of up to kWideMidRowThreads.
        const bool two_phase =
            f.family == RowFamily::kLayerNormForward || f.family == RowFamily::kResidualLayerNormForward;
        const bool packed = n % vec == 0 && (elem == 2 || (elem == 4 && (two_phase || sums)));
        if (packed && elem == 4) {
          if (two_phase) {
            ASSERT_NE(c.wide_form, WideForm::kLean);
          } else {
            ASSERT_EQ(c.wide_form, WideForm::kRoomy);
          }
        }
        if (packed && !two_phase && c.wide_form == WideForm::kMid) {
          ASSERT_LE(c.threads, kWideMidRowThreads);
        }
        break;
      }
      case RowKernelKind::kBlock:
        ASSERT_GE(c.threads, 32);
        ASSERT_LE(c.threads, kBlockKernelMaxThreads) << "past the kernels' launch bounds";
        ASSERT_EQ(c.threads % 32, 0);
        ASSERT_GE(c.cluster, 1);
        ASSERT_LE(c.cluster, std::min(limits.max_cluster, kHardwareMaxCluster));
        ASSERT_GE(c.tiles, 1);
        ASSERT_LE(c.vpt, max_vpt);
        if (c.ring > 0 && elem < 4) {  // the launcher rings 16-bit rows only
          ASSERT_EQ(c.cluster, 1) << "ring rows are one-CTA rows";
          ASSERT_EQ(c.tiles, 1);
          ASSERT_TRUE(has_row_vpt(built.ring, c.vpt)) << "no ring kernel built";
          ASSERT_GE(c.smem_bytes, std::size_t(c.ring) * c.threads * c.vpt * 16 * f.inputs) << "ring buffers";
        } else if (c.tiles > 1) {
          const int reread = reread_vpt(kRereadTileWords, vec, acc_words, f.inputs);
          const int reread_small = reread_vpt(kRereadSmallTileWords, vec, acc_words, f.inputs);
          ASSERT_LE(c.stash_tiles, c.tiles - 1) << "the last tile stays in registers";
          if (c.cluster == 1 && (c.vpt == reread || c.vpt == reread_small)) {
            // Re-read rows: bulk-copied stash, a barrier a tile, slots of threads + 1 granules.
            ASSERT_LE(c.stash_tiles, kMaxBulkStashTiles);
            ASSERT_GE(c.smem_bytes, c.stash_tiles * bulk_stash_tile_bytes(c.threads, c.vpt, f.inputs));
          } else {
            ASSERT_EQ(c.vpt, max_vpt) << "held streamed rows are built for the largest tile only";
            ASSERT_GE(c.smem_bytes, std::size_t(c.stash_tiles) * f.inputs * c.vpt * c.threads * 16);
          }
        } else {
          ASSERT_TRUE(has_row_vpt(c.cluster > 1 ? built.cluster : built.block, c.vpt)) << "no block kernel built";
        }
        break;
    }
    // Split rows, where the launcher runs them (the one-input forwards and the norm forwards:
    // launch_row_op_split), as row_split.cuh needs them.
    const RowSplitConfig& s = c.split;
    const bool split_launched =
        f.family != RowFamily::kNormBackward && !(f.family == RowFamily::kRowwise && f.inputs == 2);
    if (s.chunks == 0 || !split_launched || f.cross_entropy) continue;
    ++splits;
    ASSERT_EQ(s.threads, kRowSplitThreads);
    ASSERT_GE(s.chunk_tiles, 1);
    if (s.reread) {
      ASSERT_EQ(s.vpt, reread_split_vpt(elem, f.inputs));
      ASSERT_EQ(s.ring, 0);
      ASSERT_EQ(s.smem_bytes, 0u);
      ASSERT_LE(s.grid, limits.sm_count * kRereadSplitCtasPerSm) << "more CTAs than the launch bounds keep resident";
    } else {
      ASSERT_EQ(s.vpt, kRowSplitVpt);
      ASSERT_GE(s.ring, 2);
      ASSERT_LE(s.ring, 4);
      ASSERT_GE(s.smem_bytes, std::size_t(s.ring) * s.chunk_tiles * kRowSplitThreads * kRowSplitVpt * 16 * f.inputs);
      ASSERT_LE(s.smem_bytes, limits.max_smem_per_block);
      ASSERT_LE(int64_t(s.grid) * (s.smem_bytes + kRowSplitSmemReserve),
                int64_t(limits.sm_count) * limits.max_smem_per_sm)
          << "the planned grid is not resident at once";
    }
    // A CTA waits only for chunks of resident CTAs (deadlock freedom).
    ASSERT_GE(s.chunks, 2);
    ASSERT_LE(s.chunks, s.grid);
    // Chunks cover the row, none wholly past it, and their element offsets stay in int.
    ASSERT_GE(s.chunks * s.chunk_vectors(), vectors);
    ASSERT_LT((s.chunks - 1) * s.chunk_vectors(), vectors);
    ASSERT_LE(s.chunks * s.chunk_vectors() * vec, int64_t(INT32_MAX));
    // The workspace holds a counter a row (16-byte aligned) and every chunk's statistic, for up
    // to 2^31 rows: partials[row * chunks + chunk] (row_split.cuh).
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, int64_t(1) << 31)(rng);
    const std::size_t stat_bytes = 4 * (1 + rng() % 8);
    const RowSplitWorkspace w = row_split_workspace(c, rows, stat_bytes);
    ASSERT_EQ(w.zeroed_bytes % 16, 0u);
    ASSERT_GE(w.zeroed_bytes, std::size_t(rows) * sizeof(unsigned));
    ASSERT_GE(w.bytes - w.zeroed_bytes, std::size_t(rows) * s.chunks * stat_bytes);
  }
  // The generator must reach every kind and the split rows, or this test proves little.
  for (int k = 0; k < 4; ++k) EXPECT_GT(kinds[k], 200) << "kind " << k;
  EXPECT_GT(splits, 200);
}

// A sweep's overrides (reducekit/tuning.hpp, row_kernel_limits; the REDUCEKIT_ALL_ROW_TILES build,
// every tile built) on random rows and devices: the plan may change, but it still covers the row
// with a tile the kernels take, within int indices, the launch bounds and the device's shared
// memory. (Two-input rows of 2^29..2^30 values at block_elems 1 overflowed the thread count's
// rounding, an endless loop, before plan_held_rows capped it first.)
TEST(RowKernelPlanRandom, SweepOverridesKeepPlansRunnable) {
  std::mt19937_64 rng(77031);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 20000; ++trial) {
    const int elem = 2 << uniform(0, 2);
    const int inputs = static_cast<int>(uniform(1, 2));
    RowKernelLimits limits = random_device_limits(row_policy(static_cast<RowFamily>(uniform(0, 6)), elem), rng);
    limits.max_cluster = static_cast<int>(uniform(1, kHardwareMaxCluster));
    limits.max_block_threads = static_cast<int>(32 * uniform(1, kBlockKernelMaxThreads / 32));
    limits.min_block_threads = static_cast<int>(32 * uniform(0, 16));
    limits.block_elems = static_cast<int>(uniform(0, 3) == 0 ? 1 : uniform(1, 64));
    limits.max_tile_values = static_cast<int>(uniform(1, kRowTileWords));
    limits.split_chunk_tiles = static_cast<int>(uniform(1, 8));
    limits.split_ring = static_cast<int>(uniform(2, 4));  // row_kernel_limits clamps it so
    limits.split_min_cluster = static_cast<int>(uniform(1, 16));
    limits.split_max_elem_bytes = static_cast<int>(2 << uniform(0, 2));
    limits.split_reread_from_bytes = uniform(0, 1) == 0 ? 0 : uniform(1, int64_t(1) << 26);
    limits.split_reread_min_chunk_tiles = static_cast<int>(uniform(1, 16));
    limits.reread_above_words = static_cast<int>(uniform(0, kRowTileWords));
    limits.reread_small_tiles_from_bytes = uniform(0, int64_t(1) << 22);
    limits.reread_stash_bytes = static_cast<std::size_t>(uniform(0, 230 * 1024));
    const int64_t n = uniform(0, 2) == 0 ? kMaxRowLength - uniform(0, 64) : random_row_length(rng);
    const RowKernelConfig c = plan_row_kernel(n, elem, inputs, limits);
    SCOPED_TRACE(testing::Message() << "n=" << n << " elem=" << elem << " inputs=" << inputs << " max_block_threads="
                                    << limits.max_block_threads << " block_elems=" << limits.block_elems
                                    << " max_tile_values=" << limits.max_tile_values << " max_cluster="
                                    << limits.max_cluster << " plan " << describe(c));
    const int vec = 16 / elem;
    const int acc_words = elem == 8 ? 2 : 1;
    const int max_vpt = kRowTileWords / (vec * acc_words * inputs);
    ASSERT_GE(c.capacity(), n);
    ASSERT_LE(c.capacity(), int64_t(INT32_MAX));
    ASSERT_LE(c.smem_bytes, limits.max_smem_per_block);
    ASSERT_LE(c.cluster, limits.max_cluster);
    if (c.kind == RowKernelKind::kBlock) {
      ASSERT_GE(c.threads, 32);
      ASSERT_LE(c.threads, limits.max_block_threads);
      ASSERT_EQ(c.threads % 32, 0);
      ASSERT_TRUE(row_vpt_bit(c.vpt) != 0 && (c.vpt & (c.vpt - 1)) == 0 && c.vpt <= max_vpt) << "pick_tile builds none";
      ASSERT_LE(c.stash_tiles, c.tiles - 1);
      const bool reread = c.vpt == reread_vpt(kRereadTileWords, vec, acc_words, inputs) ||
                          c.vpt == reread_vpt(kRereadSmallTileWords, vec, acc_words, inputs);
      if (c.tiles > 1 && c.cluster == 1 && reread) {
        ASSERT_LE(c.stash_tiles, kMaxBulkStashTiles);
      } else if (c.tiles > 1) {
        ASSERT_EQ(c.vpt, max_vpt);
      }
    }
    const RowSplitConfig& s = c.split;
    if (s.chunks > 0) {
      ASSERT_GE(s.chunks, 2);
      ASSERT_LE(s.chunks, s.grid);
      ASSERT_LE(s.smem_bytes, limits.max_smem_per_block);
      const int64_t vectors = (n + vec - 1) / vec;
      ASSERT_GE(s.chunks * s.chunk_vectors(), vectors);
      ASSERT_LE(s.chunks * s.chunk_vectors() * vec, int64_t(INT32_MAX));
    }
  }
}

}  // namespace
}  // namespace reducekit
