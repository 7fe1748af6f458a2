// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_batch_norm: layout detection and rejection, vector width, how the chunks
// and tiles cover x (the invariants batch_norm.cuh relies on), CTA counts and workspace layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/batch_norm_plan.hpp"

namespace reducekit {
namespace {

using Sizes = std::vector<int64_t>;

Sizes contiguous_strides(const Sizes& sizes) {
  Sizes strides(sizes.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  return strides;
}

// C innermost, then the spatial dims in order, then N (torch's channels_last / channels_last_3d).
Sizes channels_last_strides(const Sizes& sizes) {
  Sizes strides(sizes.size());
  strides[1] = 1;
  int64_t stride = sizes[1];
  for (int d = static_cast<int>(sizes.size()) - 1; d >= 2; --d) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  strides[0] = stride;
  return strides;
}

constexpr int kSms = 132;  // an H200's

Status plan_of(const Sizes& sizes, const Sizes& strides, int elem, BatchNormPlan* plan, bool aligned = true) {
  const int acc = elem == 8 ? 8 : 4;
  return plan_batch_norm(static_cast<int>(sizes.size()), sizes.data(), strides.data(), elem, acc, aligned, kSms,
                         plan);
}

BatchNormPlan must_plan(const Sizes& sizes, bool channels_last, int elem, bool aligned = true) {
  BatchNormPlan p;
  const Status s = plan_of(sizes, channels_last ? channels_last_strides(sizes) : contiguous_strides(sizes), elem, &p,
                           aligned);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return p;
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Everything the kernels and the workspace binding assume of a plan.
void check_invariants(const BatchNormPlan& p, int elem) {
  const int acc = elem == 8 ? 8 : 4;
  const int64_t units = p.n * p.s;  // channels-first: elements of a channel; channels-last: rows
  EXPECT_TRUE(p.vec == 1 || p.vec == 16 / elem) << p.vec;
  const int u = batch_norm_unroll(p.vec, elem);
  EXPECT_GE(u, 1);
  EXPECT_LE(u, 8);
  int64_t unit_bytes = elem;
  if (p.layout == BatchNormLayout::kChannelsFirst) {
    EXPECT_EQ(p.tiles, p.c);
    EXPECT_EQ(p.s % p.vec, 0) << "a vector would cross a run of the channel";
    if (units > 0) {
      EXPECT_EQ(p.chunk % (int64_t(kBatchNormThreads) * p.vec * u), 0) << "chunk not whole rounds";
    }
  } else {
    const int w = p.tile_vectors;
    EXPECT_TRUE(is_pow2(w) && w <= 32) << w;
    EXPECT_EQ(p.c % p.vec, 0) << "a vector would cross the end of a row";
    const int64_t row_vectors = ceil_div(p.c, p.vec);
    EXPECT_GE(p.tiles * w * p.vec, p.c) << "tiles miss channels";
    EXPECT_LT((p.tiles - 1) * w, row_vectors) << "a tile holds no channel";
    // The narrowest tile that holds the row, up to 32 vectors: no wasted columns.
    if (w > 1) {
      EXPECT_LT(w / 2, row_vectors);
    }
    if (units > 0) {
      EXPECT_EQ(p.chunk % (int64_t(kBatchNormThreads / w) * u), 0) << "chunk not whole rounds";
    }
    unit_bytes = int64_t(w) * p.vec * elem;
  }
  if (units == 0) {
    EXPECT_EQ(p.chunks, 0);
    EXPECT_EQ(p.ctas(), 0);
  } else {
    EXPECT_GE(p.chunk, 1);
    EXPECT_GE(p.chunks * p.chunk, units) << "chunks miss values";
    EXPECT_LT((p.chunks - 1) * p.chunk, units) << "an empty chunk";
    // Chunks of about kBatchNormChunkBytes: never more than that unless one round is.
    const int64_t round_bytes = p.chunk * unit_bytes / std::max<int64_t>(1, p.chunk * unit_bytes / kBatchNormChunkBytes);
    EXPECT_TRUE(p.chunk * unit_bytes <= kBatchNormChunkBytes || p.chunk * unit_bytes == round_bytes)
        << p.chunk * unit_bytes;
    EXPECT_GT(2 * p.chunk * unit_bytes, std::min<int64_t>(kBatchNormChunkBytes, round_bytes)) << "chunks too small";
    // Statistics CTAs: every one has a chunk, and all of them fit two an SM (or one a tile).
    EXPECT_GE(p.stats_ctas, 1);
    EXPECT_LE(p.stats_ctas, p.chunks);
    EXPECT_LE(p.stats_grid(), std::max<int64_t>(p.tiles, int64_t(kSms) * kBatchNormStatsCtasPerSm + p.tiles - 1));
  }
  // Partials [c][stats_ctas][2], then params [c][4], 16-byte aligned.
  EXPECT_GE(p.params_offset, static_cast<std::size_t>(p.c * p.stats_ctas * 2 * acc));
  EXPECT_EQ(p.params_offset % 16, 0u);
  EXPECT_GE(p.workspace_bytes, p.params_offset + static_cast<std::size_t>(p.c * 4 * acc));
}

TEST(BatchNormPlan, ContiguousIsChannelsFirstUnlessOneValueAPosition) {
  for (const Sizes& sizes : {Sizes{4, 3, 5}, Sizes{2, 3, 7, 7}, Sizes{2, 5, 3, 4, 5}, Sizes{1, 8, 2}}) {
    SCOPED_TRACE(testing::Message() << "rank " << sizes.size());
    const BatchNormPlan p = must_plan(sizes, false, 4);
    EXPECT_EQ(p.layout, BatchNormLayout::kChannelsFirst);
    EXPECT_EQ(p.n, sizes[0]);
    EXPECT_EQ(p.c, sizes[1]);
    int64_t s = 1;
    for (std::size_t d = 2; d < sizes.size(); ++d) s *= sizes[d];
    EXPECT_EQ(p.s, s);
  }
  // s == 1: [N, C] rows, read whole by the channels-last kernels.
  for (const Sizes& sizes : {Sizes{2, 3}, Sizes{6, 4, 1, 1}, Sizes{6, 4, 1, 1, 1}, Sizes{64, 1024}}) {
    const BatchNormPlan p = must_plan(sizes, false, 4);
    EXPECT_EQ(p.layout, BatchNormLayout::kChannelsLast) << "rank " << sizes.size();
    EXPECT_EQ(p.s, 1);
  }
  // ... except with one channel, which is one run a sample.
  EXPECT_EQ(must_plan({6, 1}, false, 4).layout, BatchNormLayout::kChannelsFirst);
  EXPECT_EQ(must_plan({6, 1, 1, 1}, false, 4).layout, BatchNormLayout::kChannelsFirst);
}

TEST(BatchNormPlan, ChannelsLastStridesAreChannelsLast) {
  for (const Sizes& sizes : {Sizes{4, 3, 5}, Sizes{2, 3, 7, 7}, Sizes{8, 64, 4, 4}, Sizes{2, 5, 3, 4, 5}}) {
    const Sizes strides = channels_last_strides(sizes);
    EXPECT_EQ(strides[1], 1);
    BatchNormPlan p;
    ASSERT_TRUE(plan_of(sizes, strides, 2, &p).is_ok());
    EXPECT_EQ(p.layout, BatchNormLayout::kChannelsLast) << "rank " << sizes.size();
  }
  // NHWC strides by hand: (N, C, H, W) = (2, 3, 4, 5) -> {H*W*C, 1, W*C, C}.
  BatchNormPlan p;
  ASSERT_TRUE(plan_of({2, 3, 4, 5}, {60, 1, 15, 3}, 4, &p).is_ok());
  EXPECT_EQ(p.layout, BatchNormLayout::kChannelsLast);
  EXPECT_EQ(p.s, 20);
  // One channel: channels-last strides are contiguous too, and the plan reads runs.
  EXPECT_EQ(must_plan({5, 1, 6, 6}, true, 4).layout, BatchNormLayout::kChannelsFirst);
  EXPECT_EQ(must_plan({5, 1, 1, 1}, true, 4).layout, BatchNormLayout::kChannelsFirst);
  // Size-1 dims may carry any stride.
  ASSERT_TRUE(plan_of({1, 3, 4, 5}, {999, 1, 15, 3}, 4, &p).is_ok());
  EXPECT_EQ(p.layout, BatchNormLayout::kChannelsLast);
}

TEST(BatchNormPlan, OtherLayoutsAreUnsupported) {
  BatchNormPlan p;
  // H and W transposed.
  Status s = plan_of({2, 3, 4, 5}, {60, 20, 1, 4}, 4, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  EXPECT_EQ(s.message().rfind("x:", 0), 0u) << s.message();
  // N innermost.
  s = plan_of({2, 3, 4, 5}, {1, 40, 10, 2}, 4, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  // Channels-first with padded rows (not dense).
  s = plan_of({2, 3, 4, 5}, {72, 24, 6, 1}, 4, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  // Channels-last with padded channels.
  s = plan_of({2, 3, 4, 5}, {80, 1, 20, 4}, 4, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  // More CTAs than one launch takes.
  s = plan_of({2, int64_t(3) << 30, 2}, contiguous_strides({2, int64_t(3) << 30, 2}), 4, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
}

TEST(BatchNormPlan, BadRanksAndNoChannelsAreInvalid) {
  BatchNormPlan p;
  for (const Sizes& sizes : {Sizes{8}, Sizes{2, 3, 2, 2, 2, 2}}) {
    const Status s = plan_of(sizes, contiguous_strides(sizes), 4, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "rank " << sizes.size();
    EXPECT_EQ(s.message().rfind("x:", 0), 0u) << s.message();
  }
  for (const Sizes& sizes : {Sizes{4, 0}, Sizes{2, 0, 3, 3}}) {
    const Status s = plan_of(sizes, contiguous_strides(sizes), 4, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  }
}

TEST(BatchNormPlan, VectorWidth) {
  // Channels-first: the inner extent is s.
  EXPECT_EQ(must_plan({2, 3, 4, 4}, false, 4).vec, 4);
  EXPECT_EQ(must_plan({2, 3, 4, 4}, false, 2).vec, 8);
  EXPECT_EQ(must_plan({2, 3, 4, 4}, false, 8).vec, 2);
  EXPECT_EQ(must_plan({2, 3, 7, 7}, false, 8).vec, 1);
  EXPECT_EQ(must_plan({2, 3, 3, 4}, false, 2).vec, 1);  // 12 % 8
  EXPECT_EQ(must_plan({2, 3, 3, 4}, false, 4).vec, 4);
  // Channels-last: the inner extent is c.
  EXPECT_EQ(must_plan({8, 64, 4, 4}, true, 4).vec, 4);
  EXPECT_EQ(must_plan({8, 40, 3, 3}, true, 2).vec, 8);
  EXPECT_EQ(must_plan({8, 36, 3, 3}, true, 2).vec, 1);
  EXPECT_EQ(must_plan({8, 36, 3, 3}, true, 4).vec, 4);
  EXPECT_EQ(must_plan({2, 3, 7, 7}, true, 4).vec, 1);
  EXPECT_EQ(must_plan({6, 4}, false, 4).vec, 4);  // [N, C] rows
  // A misaligned base: scalar loads, with unchanged layout.
  for (bool last : {false, true}) {
    const BatchNormPlan a = must_plan({8, 64, 4, 4}, last, 4, true), b = must_plan({8, 64, 4, 4}, last, 4, false);
    EXPECT_GT(a.vec, 1);
    EXPECT_EQ(b.vec, 1);
    EXPECT_EQ(a.layout, b.layout);
    check_invariants(b, 4);
  }
}

TEST(BatchNormPlan, InvariantsOverManyShapes) {
  const std::vector<Sizes> shapes = {
      {2, 3},          {4, 3, 5},        {2, 3, 7, 7},      {3, 16, 8, 8},     {8, 64, 4, 4},    {2, 5, 3, 4, 5},
      {16, 8, 64, 64}, {64, 32, 32, 32}, {5, 1, 6, 6},      {6, 4, 1, 1},      {8, 100, 3, 3},   {1, 7, 1000003},
      {256, 33},       {3, 1000, 1},     {2, 37, 129},      {128, 2048, 7, 7}, {1, 2, 65536, 3}, {7, 4096},
      {0, 3, 4, 4},    {0, 5},           {32, 64, 112, 112}};
  for (const Sizes& sizes : shapes)
    for (bool last : {false, true})
      for (int elem : {2, 4, 8})
        for (bool aligned : {true, false}) {
          SCOPED_TRACE(testing::Message() << "shape [" << sizes[0] << ", " << sizes[1] << ", ...] rank " << sizes.size()
                                          << (last ? " channels-last" : " contiguous") << " elem " << elem
                                          << (aligned ? "" : " misaligned"));
          check_invariants(must_plan(sizes, last, elem, aligned), elem);
          if (testing::Test::HasFailure()) return;
        }
}

TEST(BatchNormPlan, LargeInputsFillTheGpuSmallOnesStayFew) {
  for (const Sizes& sizes : {Sizes{32, 64, 112, 112}, Sizes{128, 32, 56, 56}, Sizes{64, 2048, 7, 7}})
    for (bool last : {false, true})
      for (int elem : {2, 4, 8}) {
        const BatchNormPlan p = must_plan(sizes, last, elem);
        const std::string what = "[" + std::to_string(sizes[0]) + ", " + std::to_string(sizes[1]) + ", ...] " +
                                 (last ? "channels-last" : "contiguous") + " elem " + std::to_string(elem);
        // The apply pass: many short CTAs (one a chunk's bytes); the statistics pass: about two an SM.
        const int64_t bytes = p.n * p.c * p.s * elem;
        EXPECT_GE(p.ctas(), std::min<int64_t>(4 * kSms, bytes / kBatchNormChunkBytes)) << what;
        EXPECT_GE(p.stats_grid(), kSms) << what;
      }
  // Several chunks a channel where the channel is large.
  EXPECT_GT(must_plan({16, 8, 64, 64}, false, 4).chunks, 1);
  EXPECT_GT(must_plan({64, 32, 32, 32}, true, 4).chunks, 100);
  // A tiny tensor: one chunk a tile, one tile (channels-last) or one a channel (channels-first).
  for (int elem : {2, 4, 8}) {
    const BatchNormPlan first = must_plan({2, 3, 4, 4}, false, elem), last = must_plan({2, 3, 4, 4}, true, elem);
    EXPECT_EQ(first.chunks, 1);
    EXPECT_EQ(first.ctas(), 3);
    EXPECT_EQ(first.stats_grid(), 3);
    EXPECT_EQ(last.ctas(), 1);
    EXPECT_EQ(must_plan({2, 3}, false, elem).ctas(), 1);
  }
  // The statistics CTAs follow the SM count (and so the merge order: deterministic per GPU model).
  BatchNormPlan small_gpu;
  const Sizes big{32, 64, 112, 112};
  ASSERT_TRUE(plan_batch_norm(4, big.data(), contiguous_strides(big).data(), 4, 4, true, 16, &small_gpu).is_ok());
  EXPECT_LT(small_gpu.stats_grid(), must_plan(big, false, 4).stats_grid());
}

TEST(BatchNormPlan, ChannelsLastTiles) {
  // c = 64 float32: 16 vectors of 4, one tile of 16.
  BatchNormPlan p = must_plan({8, 64, 4, 4}, true, 4);
  EXPECT_EQ(p.vec, 4);
  EXPECT_EQ(p.tile_vectors, 16);
  EXPECT_EQ(p.tiles, 1);
  // c = 100 scalar (bfloat16, 100 % 8 != 0): 32-vector tiles, the last one partly empty.
  p = must_plan({8, 100, 3, 3}, true, 2);
  EXPECT_EQ(p.vec, 1);
  EXPECT_EQ(p.tile_vectors, 32);
  EXPECT_EQ(p.tiles, 4);
  // c = 3: a tile of 4 vectors, one of them empty.
  p = must_plan({2, 3, 7, 7}, true, 4);
  EXPECT_EQ(p.tile_vectors, 4);
  EXPECT_EQ(p.tiles, 1);
  // 2048 float32 channels: 512 vectors, 16 tiles of 32.
  p = must_plan({64, 2048, 7, 7}, true, 4);
  EXPECT_EQ(p.tile_vectors, 32);
  EXPECT_EQ(p.tiles, 16);
}

TEST(BatchNormPlan, EmptyBatchHasNoChunks) {
  for (bool last : {false, true}) {
    const BatchNormPlan p = must_plan({0, 3, 4, 4}, last, 4);
    EXPECT_EQ(p.channel_count(), 0);
    EXPECT_EQ(p.chunks, 0);
    EXPECT_EQ(p.ctas(), 0);
    EXPECT_GE(p.tiles, 1);
    EXPECT_GE(p.workspace_bytes, p.params_offset + 3 * 4 * 4);
  }
}

TEST(BatchNormPlan, WorkspaceLayoutExactSizes) {
  // (3, 16, 8, 8) float32, contiguous: 16 tiles, one chunk each.
  BatchNormPlan p = must_plan({3, 16, 8, 8}, false, 4);
  EXPECT_EQ(p.chunks, 1);
  EXPECT_EQ(p.stats_ctas, 1);
  EXPECT_EQ(p.params_offset, 16u * 1 * 2 * 4);
  EXPECT_EQ(p.workspace_bytes, p.params_offset + 16 * 4 * 4);
  // float64 accumulation doubles the partials and parameters.
  p = must_plan({2, 5, 3, 4, 5}, false, 8);
  EXPECT_EQ(p.params_offset, (5 * p.stats_ctas * 2 * 8 + 15) / 16 * 16);
  EXPECT_EQ(p.workspace_bytes, p.params_offset + 5 * 4 * 8);
}

// What batch_norm_resident.cuh assumes of a single-read layout: the CTAs' pieces cover every
// run exactly once, no CTA is empty, a slot holds its piece at any granule offset, and the CTA's
// slots fit the tier it was planned for.
void check_resident(const BatchNormPlan& p, const BatchNormResidentPlan& r, int elem, int inputs) {
  ASSERT_GE(r.cluster, 1);
  EXPECT_EQ(r.pieces, p.n * r.parts);
  EXPECT_GE(r.piece * r.parts, p.s) << "pieces miss elements of a run";
  EXPECT_LT((r.parts - 1) * r.piece, p.s) << "an empty piece";
  EXPECT_GE(r.pieces_per_cta * r.cluster, r.pieces) << "CTAs miss pieces";
  EXPECT_LT((r.cluster - 1) * r.pieces_per_cta, r.pieces) << "an empty CTA";
  // The worst granule offset (16 - elem bytes) still fits the slot.
  EXPECT_GE(r.slot_granules * 16, 16 - elem + r.piece * elem);
  if (r.parts > 1 && p.s * elem % 16 == 0) EXPECT_EQ(r.piece * elem % 16, 0) << "an aligned run cut off a granule";
  EXPECT_EQ(r.smem_bytes, static_cast<std::size_t>(r.pieces_per_cta * r.slot_granules * 16 * inputs));
  EXPECT_LE(r.cluster, kBatchNormResidentClusterLimit);
  EXPECT_LE(r.smem_bytes, kBatchNormResidentTiers[1]);
  EXPECT_TRUE(is_pow2(r.group) && r.group <= 32) << r.group;
  EXPECT_TRUE(r.group == 32 || r.group >= r.slot_granules) << "a group narrower than its piece's slot";
  EXPECT_TRUE(r.group == 1 || r.group / 2 < r.slot_granules) << "a group wider than it needs";
}

TEST(BatchNormPlan, ResidentLayoutsOfTheBenchmarkShapes) {
  struct Want {
    Sizes sizes;
    int elem, inputs, cluster;
    int64_t parts;
  };
  // Chosen by the rule: the smallest tier, then the smallest cluster, then the fewest pieces a run.
  // cluster 0: the channel is past 4 CTAs' shared memory (three passes).
  for (const Want& w : {Want{{32, 64, 112, 112}, 4, 1, 0, 0},     // 1.6 MB a channel
                        Want{{8, 32, 256, 256}, 2, 1, 0, 0},      // 1 MB
                        Want{{64, 256, 28, 28}, 4, 1, 3, 1},      // 196 KiB: 3 x 68 KiB
                        Want{{64, 256, 28, 28}, 4, 2, 4, 1},      // x and dy: 4 x 101 KiB
                        Want{{256, 1024, 7, 7}, 4, 1, 1, 1},      // 49 KiB: one CTA
                        Want{{256, 1024, 7, 7}, 2, 2, 1, 1},      // x and dy: 49 KiB
                        Want{{1, 3, 171, 173}, 4, 1, 2, 2},       // one run of 116 KiB: halves off granules
                        Want{{2, 2, 300, 200}, 2, 1, 4, 2}}) {    // runs of 117 KiB cut on granules
    SCOPED_TRACE(testing::Message() << "elem " << w.elem << " inputs " << w.inputs << " n " << w.sizes[0]
                                    << " c " << w.sizes[1]);
    const BatchNormPlan p = must_plan(w.sizes, false, w.elem);
    const BatchNormResidentPlan r = plan_batch_norm_resident(p, w.elem, w.inputs, true);
    EXPECT_EQ(r.cluster, w.cluster);
    if (w.cluster == 0) continue;
    check_resident(p, r, w.elem, w.inputs);
    EXPECT_EQ(r.parts, w.parts);
  }
}

TEST(BatchNormPlan, ResidentLayoutInvariantsOverManyShapes) {
  int resident = 0;
  for (int elem : {2, 4, 8})
    for (int inputs : {1, 2})
      for (int64_t n : {1, 2, 3, 8, 33, 256})
        for (int64_t s : {2, 7, 49, 64, 784, 1001, 12544, 65536, 262144, 1 << 20}) {
          const BatchNormPlan p = must_plan({n, 5, s}, false, elem);
          const BatchNormResidentPlan r = plan_batch_norm_resident(p, elem, inputs, true);
          SCOPED_TRACE(testing::Message() << "elem " << elem << " inputs " << inputs << " n " << n << " s " << s);
          if (r.cluster == 0) {
            // Only channels larger than the biggest cluster's shared memory (or one value) go without.
            EXPECT_TRUE(n * s < 2 || n * s * elem * inputs > int64_t(kBatchNormResidentTiers[0]) * kBatchNormResidentClusterLimit)
                << n * s * elem * inputs;
            continue;
          }
          ++resident;
          check_resident(p, r, elem, inputs);
        }
  EXPECT_GT(resident, 100);
}

TEST(BatchNormPlan, NoResidentLayoutWhereItCannotApply) {
  // Channels-last, outputs off x's granule offset, channels past 4 x 108 KiB, one value a channel.
  const BatchNormPlan last = must_plan({8, 64, 4, 4}, true, 4);
  EXPECT_EQ(plan_batch_norm_resident(last, 4, 1, true).cluster, 0);
  const BatchNormPlan first = must_plan({8, 64, 4, 4}, false, 4);
  EXPECT_GT(plan_batch_norm_resident(first, 4, 1, true).cluster, 0);
  EXPECT_EQ(plan_batch_norm_resident(first, 4, 1, false).cluster, 0);
  const BatchNormPlan large = must_plan({2, 2, 300, 200}, false, 4);  // 469 KiB a channel
  EXPECT_EQ(plan_batch_norm_resident(large, 4, 1, true).cluster, 0);
  EXPECT_GT(plan_batch_norm_resident(must_plan({2, 2, 300, 200}, false, 2), 2, 1, true).cluster, 0);
  EXPECT_EQ(plan_batch_norm_resident(must_plan({1, 3, 1}, false, 4), 4, 1, true).cluster, 0);
}


// SyncBatchNorm's workspace: the single-GPU part rounded to 16 bytes, then R packets of C rows of
// three float64 (what one in-place allgather fills); no rank or a size past size_t is refused.
TEST(BatchNormPlan, InferenceTakesTheFlatKernelForRaggedAndSmallPlanes) {
  struct Case {
    Sizes sizes;
    int elem;
    bool flat;
  };
  const Case cases[] = {
      {{256, 1024, 7, 7}, 2, true},     // 49 values: not whole vectors
      {{256, 1024, 7, 7}, 4, true},
      {{64, 256, 28, 28}, 2, true},     // whole vectors, 1568 bytes
      {{64, 256, 28, 28}, 4, true},     // 3136 bytes
      {{2, 3, 64, 64}, 2, true},        // 8192 bytes: the last flat size
      {{2, 3, 64, 64}, 4, false},       // 16 KiB of whole vectors: chunked
      {{32, 64, 112, 112}, 2, false},
      {{32, 64, 112, 112}, 4, false},
      {{8, 32, 256, 256}, 2, false},
      {{4, 3, 2, 4}, 2, true},          // one 16-bit vector a plane
      {{4, 3, 2, 4}, 4, true},          // two float32 ones
      {{4, 3, 3}, 4, false},            // less than a vector a plane
      {{3, 7, 5, 3}, 8, true},          // 15 float64 values: not whole vectors
      {{1, 3, 999, 1001}, 4, true},     // ragged planes of any size (999999 values)
  };
  for (const Case& k : cases) {
    const BatchNormPlan p = must_plan(k.sizes, false, k.elem);
    EXPECT_EQ(batch_norm_inference_flat(p, k.elem), k.flat)
        << "planes of " << p.s << " values, " << k.elem << "-byte elements";
  }
  EXPECT_FALSE(batch_norm_inference_flat(must_plan({4, 16, 7, 7}, true, 2), 2)) << "channels-last";
  EXPECT_FALSE(batch_norm_inference_flat(must_plan({0, 16, 7, 7}, false, 2), 2)) << "an empty batch";
}

TEST(BatchNormPlan, SyncWorkspaceIsLocalPartThenPackets) {
  SyncBatchNormWorkspace w;
  ASSERT_TRUE(plan_sync_batch_norm_workspace(1000, 2, 64, &w).is_ok());
  EXPECT_EQ(w.packets_offset, 1008u);
  EXPECT_EQ(w.packet_bytes, 64u * 3 * 8);
  EXPECT_EQ(w.bytes, 1008u + 2 * 64 * 3 * 8);
  ASSERT_TRUE(plan_sync_batch_norm_workspace(0, 8, 3, &w).is_ok());
  EXPECT_EQ(w.packets_offset, 0u);
  EXPECT_EQ(w.bytes, 8u * 3 * 3 * 8);
  ASSERT_TRUE(plan_sync_batch_norm_workspace(32, 1, 0, &w).is_ok());  // no channels: no packets
  EXPECT_EQ(w.bytes, 32u);
  const Status none = plan_sync_batch_norm_workspace(64, 0, 3, &w);
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("comm"), std::string::npos) << none.message();
  EXPECT_EQ(plan_sync_batch_norm_workspace(64, 1 << 30, int64_t(1) << 60, &w).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace reducekit
