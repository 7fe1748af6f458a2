// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_batch_norm: layout detection and rejection, vector width, how the chunks
// and tiles cover x (the invariants batch_norm.cuh relies on), CTA counts and workspace layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "plan/batch_norm_plan.hpp"

namespace reducekit {
namespace {

using Sizes = std::vector<int64_t>;

// torch's strides of its contiguous and channels-last formats: a size-0 dim counts as 1 there,
// so an empty tensor's strides are those of a non-empty one. Products past int64 wrap (unsigned):
// the planner must refuse such a shape whatever its strides say.
Sizes torch_strides(const Sizes& sizes, bool channels_last) {
  const int rank = static_cast<int>(sizes.size());
  std::vector<int> inner_first;  // dims innermost first; below rank 2 (bad-rank tests) plain order
  if (channels_last && rank >= 2) inner_first.push_back(1);
  for (int d = rank - 1; d >= 2; --d) inner_first.push_back(d);
  if (!channels_last || rank < 2)
    for (int d = std::min(rank - 1, 1); d >= 0; --d) inner_first.push_back(d);
  else
    inner_first.push_back(0);
  Sizes strides(sizes.size());
  uint64_t stride = 1;
  for (int d : inner_first) {
    strides[d] = static_cast<int64_t>(stride);
    stride *= static_cast<uint64_t>(std::max<int64_t>(sizes[d], 1));
  }
  return strides;
}

Sizes contiguous_strides(const Sizes& sizes) { return torch_strides(sizes, false); }

// C innermost, then the spatial dims in order, then N (torch's channels_last / channels_last_3d).
Sizes channels_last_strides(const Sizes& sizes) { return torch_strides(sizes, true); }

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
  // Partials [c][stats_ctas][2], then params [4][c], 16-byte aligned.
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
  if (r.parts > 1 && p.s * elem % 16 == 0) {
    EXPECT_EQ(r.piece * elem % 16, 0) << "an aligned run cut off a granule";
  }
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

// Channels-first planes under the byte limit read as the columns of [N, C * S]: a channels-last
// plan of whole vectors over the matrix; never with the limit at 0, for channels-last x, one
// value a position, misaligned pointers or C * S short of whole vectors.
TEST(BatchNormPlan, SmallPlanesAsColumns) {
  BatchNormPlan columns;
  const BatchNormPlan seven = must_plan({256, 1024, 7, 7}, false, 2);
  ASSERT_TRUE(plan_batch_norm_columns(seven, 2, 4, true, kSms, 128, &columns));
  EXPECT_EQ(columns.layout, BatchNormLayout::kChannelsLast);
  EXPECT_EQ(columns.n, 256);
  EXPECT_EQ(columns.c, 1024 * 49);
  EXPECT_EQ(columns.s, 1);
  EXPECT_EQ(columns.vec, 8);
  EXPECT_EQ(columns.channel_count(), 256);
  EXPECT_GE(columns.workspace_bytes, columns.params_offset + std::size_t(1024 * 49 * 4 * 4));
  EXPECT_FALSE(plan_batch_norm_columns(seven, 2, 4, true, kSms, 98, &columns)) << "98-byte planes, limit 98";
  EXPECT_FALSE(plan_batch_norm_columns(seven, 2, 4, true, kSms, 0, &columns)) << "limit 0: never";
  // The shipped limit: 7x7 maps in 16 and 32 bits, not 14x14 ones.
  EXPECT_TRUE(plan_batch_norm_columns(seven, 2, 4, true, kSms, kBatchNormColumnPlaneBytes, &columns));
  EXPECT_TRUE(plan_batch_norm_columns(must_plan({256, 1024, 7, 7}, false, 4), 4, 4, true, kSms,
                                      kBatchNormColumnPlaneBytes, &columns));
  EXPECT_FALSE(plan_batch_norm_columns(must_plan({64, 256, 14, 14}, false, 2), 2, 4, true, kSms,
                                       kBatchNormColumnPlaneBytes, &columns));
  EXPECT_FALSE(plan_batch_norm_columns(seven, 2, 4, false, kSms, 128, &columns)) << "misaligned";
  EXPECT_FALSE(plan_batch_norm_columns(must_plan({256, 1024, 7, 7}, true, 2), 2, 4, true, kSms, 128, &columns));
  EXPECT_FALSE(plan_batch_norm_columns(must_plan({8, 64, 1, 1}, false, 2), 2, 4, true, kSms, 128, &columns));
  EXPECT_FALSE(plan_batch_norm_columns(must_plan({4, 3, 5, 5}, false, 2), 2, 4, true, kSms, 128, &columns))
      << "C * S = 75: not whole vectors";
  EXPECT_FALSE(plan_batch_norm_columns(must_plan({4, 3, 5, 5}, false, 8), 8, 8, true, kSms, 256, &columns));
  ASSERT_TRUE(plan_batch_norm_columns(must_plan({4, 3, 4, 4}, false, 8), 8, 8, true, kSms, 256, &columns))
      << "double: vectors of 2";
  EXPECT_EQ(columns.c, 48);
  EXPECT_EQ(columns.vec, 2);
  // Many rows a column: several statistics CTAs a tile, whose partials the finalize merges.
  ASSERT_TRUE(plan_batch_norm_columns(must_plan({2048, 8, 2, 2}, false, 2), 2, 4, true, kSms, 128, &columns));
  EXPECT_GT(columns.stats_ctas, 1);
}

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
  // Past 2^31 - 1 flat CTAs (2^45 bytes of x) the chunked kernel's grid, which the planner bounds.
  const int64_t most = int64_t(0x7fffffff) * kBatchNormThreads * 4 * 2;  // float64 values in the largest grid
  EXPECT_TRUE(batch_norm_inference_flat(must_plan({most / 5, 1, 5}, false, 8), 8));
  EXPECT_FALSE(batch_norm_inference_flat(must_plan({most / 5 + 1, 1, 5}, false, 8), 8)) << "a grid past 2^31 - 1";
  EXPECT_FALSE(batch_norm_inference_flat(must_plan({int64_t(1) << 40, 1, 5}, false, 8), 8));
}

// SyncBatchNorm's workspace: the single-GPU part rounded to 16 bytes, then R packets of C rows of
// three float64 (what one in-place allgather fills); no rank or a size past size_t is refused.
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

// ---- randomized properties -------------------------------------------------------------------
// Shapes, layouts, element sizes, alignments and SM counts drawn from a fixed seed; each property
// below is one that a kernel or the launcher (src/ops/batch_norm.cu) relies on.

// Exact arithmetic for products that may pass int64 (GCC and Clang).
using Wide = __int128;
constexpr Wide kInt64Max = std::numeric_limits<int64_t>::max();
constexpr Wide kIntMax = std::numeric_limits<int>::max();
constexpr int kSmCounts[] = {1, 78, 114, 132, 144};

Wide wide_product(const Sizes& sizes, std::size_t from, std::size_t to, bool skip_zeros) {
  Wide p = 1;
  for (std::size_t d = from; d < to; ++d)
    if (!(skip_zeros && sizes[d] == 0)) p *= sizes[d];
  return p;
}

// Mostly small sizes, some 0 and 1, some near powers of two up to 2^40: products cross int32's
// and int64's limits.
int64_t random_dim(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 20);
  if (kind == 0) return 0;
  if (kind <= 3) return 1;
  if (kind <= 12) return 2 + static_cast<int64_t>(rng() % 63);
  if (kind <= 16) return 65 + static_cast<int64_t>(rng() % 5000);
  return (int64_t(1) << (16 + rng() % 25)) + static_cast<int64_t>(rng() % 5) - 2;
}

// The values statistics CTA r of a tile folds, as the kernels weigh its partial.
int64_t stats_values(const BatchNormPlan& p, int64_t r) {
  return batch_norm_stats_values(p.chunks, p.stats_ctas, p.chunk, p.n * p.s, r);
}

std::string shape_text(const Sizes& sizes) {
  std::string t = "[";
  for (std::size_t d = 0; d < sizes.size(); ++d) t += (d ? ", " : "") + std::to_string(sizes[d]);
  return t + "]";
}

// One planned (or refused) shape against what the kernels and the launcher take of a plan.
void check_plan_properties(const Sizes& sizes, bool channels_last, int elem, bool aligned, int sms,
                           std::mt19937_64& rng, bool* planned) {
  SCOPED_TRACE(testing::Message() << shape_text(sizes) << (channels_last ? " channels-last" : " contiguous")
                                  << " elem " << elem << (aligned ? "" : " misaligned") << " sms " << sms);
  const int acc = elem == 8 ? 8 : 4;
  const Sizes strides = torch_strides(sizes, channels_last);
  BatchNormPlan p;
  const Status status = plan_batch_norm(static_cast<int>(sizes.size()), sizes.data(), strides.data(), elem, acc,
                                        aligned, sms, &p);
  const Wide nonzero = wide_product(sizes, 0, sizes.size(), true);
  *planned = status.is_ok();
  if (!status.is_ok()) {
    EXPECT_EQ(status.message().rfind("x:", 0), 0u) << status.message();
    if (nonzero > kInt64Max) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    }
    // Never a tensor of at most 2^40 bytes and 2^20 channels, empty or not, in torch's two layouts.
    EXPECT_FALSE(sizes[1] >= 1 && sizes[1] <= (1 << 20) && nonzero * elem <= (Wide(1) << 40)) << status.message();
    return;
  }
  // Sizes whose product passes int64 wrap every offset the kernels compute: refused, never planned.
  ASSERT_LE(nonzero, kInt64Max) << "planned a shape of more than 2^63 elements";
  ASSERT_EQ(p.n, sizes[0]);
  ASSERT_EQ(p.c, sizes[1]);
  ASSERT_EQ(Wide(p.s), wide_product(sizes, 2, sizes.size(), false));
  const int64_t units = p.n * p.s;  // channels-first: values of a channel; channels-last: rows

  // The kernels address x as [n, c, s] or [n * s, c]: element (i_0, ..., i_k) sits at the offset
  // its strides give (a few random elements of a non-empty x).
  if (units > 0)
    for (int trial = 0; trial < 4; ++trial) {
      Wide by_strides = 0, si = 0;
      int64_t ni = 0, ci = 0;
      for (std::size_t d = 0; d < sizes.size(); ++d) {
        const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(sizes[d]));
        by_strides += Wide(i) * strides[d];
        if (d == 0) ni = i;
        else if (d == 1) ci = i;
        else si = si * sizes[d] + i;
      }
      const Wide by_plan = p.layout == BatchNormLayout::kChannelsFirst ? (Wide(ni) * p.c + ci) * p.s + si
                                                                       : (Wide(ni) * p.s + si) * p.c + ci;
      ASSERT_TRUE(by_plan == by_strides) << "the plan's layout is not x's";
    }

  // The launcher runs VEC = 16 / elem or 1 (by_shape): 16-byte loads need an aligned base, and a
  // vector never crosses a run (channels-first) or a row (channels-last).
  const int full = 16 / elem;
  ASSERT_TRUE(p.vec == 1 || p.vec == full) << p.vec;
  if (p.vec > 1) {
    EXPECT_TRUE(aligned);
    EXPECT_EQ((p.layout == BatchNormLayout::kChannelsFirst ? p.s : p.c) % p.vec, 0);
  }
  const int unroll = batch_norm_unroll(p.vec, elem);
  Wide round = 0;  // the walk's unrolled round: elements (channels-first) or rows (channels-last)
  if (p.layout == BatchNormLayout::kChannelsFirst) {
    EXPECT_EQ(p.tiles, p.c) << "a tile a channel";
    round = Wide(kBatchNormThreads) * p.vec * unroll;
  } else {
    // A tile's columns are channels [tile * W * vec, (tile + 1) * W * vec): every channel in one.
    const int w = p.tile_vectors;
    EXPECT_TRUE(is_pow2(w) && w <= 32) << w;
    EXPECT_GE(Wide(p.tiles) * w * p.vec, p.c) << "channels no tile covers";
    EXPECT_LT(Wide(p.tiles - 1) * w * p.vec, p.c) << "a tile of no channel";
    round = Wide(kBatchNormThreads / w) * unroll;
  }
  // A tile's chunks cover its n * s values (rows) exactly: none missed, none empty.
  if (units > 0) {
    EXPECT_GE(p.chunk, 1);
    EXPECT_EQ(p.chunk % round, 0) << "chunk not whole rounds";
    EXPECT_GE(Wide(p.chunks) * p.chunk, units) << "chunks miss values";
    EXPECT_LT(Wide(p.chunks - 1) * p.chunk, units) << "an empty chunk";
  } else {
    EXPECT_EQ(p.chunks, 0);
  }
  // Statistics CTAs: each folds at least one value, together exactly a tile's, and all of them
  // (beyond one a tile) fit two an SM: one wave, so the merge order is the plan's.
  EXPECT_GE(p.stats_ctas, 1);
  EXPECT_LE(p.stats_ctas, std::max<int64_t>(p.chunks, 1));
  EXPECT_LE(Wide(p.stats_grid()), std::max<Wide>(p.tiles, Wide(sms) * kBatchNormStatsCtasPerSm));
  if (units > 0 && p.stats_ctas <= p.chunks) {
    Wide folded = 0;
    for (int64_t r = 0; r < p.stats_ctas; ++r) {
      const int64_t v = stats_values(p, r);
      EXPECT_GE(v, 1) << "statistics CTA " << r << " folds nothing";
      folded += v;
    }
    EXPECT_TRUE(folded == units) << "the partials' counts do not add up to n * s";
  }
  // Grids the launcher casts to unsigned: within CUDA's 2^31 - 1 CTAs. Apply (an empty batch's
  // inference runs one chunk a tile), statistics, finalize (8 channels a CTA), per-channel kernels.
  EXPECT_LE(Wide(p.tiles) * std::max<int64_t>(p.chunks, 1), kIntMax);
  EXPECT_LE(Wide(p.tiles) * p.stats_ctas, kIntMax);
  EXPECT_LE((Wide(p.c) + 7) / 8, kIntMax) << "finalize grid";
  EXPECT_LE((Wide(p.c) + kBatchNormThreads - 1) / kBatchNormThreads, kIntMax);
  // The flat inference kernel: exact divisions below 2^50, s >= VEC, and a grid (CTAs of 256 * 4
  // vectors) within CUDA's 2^31 - 1.
  if (batch_norm_inference_flat(p, elem)) {
    const Wide total = Wide(p.n) * p.c * p.s;
    EXPECT_LT(total, Wide(1) << 50);
    EXPECT_GE(p.s, full);
    const Wide per_cta = Wide(kBatchNormThreads) * 4 * full;
    EXPECT_EQ(Wide(batch_norm_flat_grid(p.n * p.c * p.s, elem)), (total + per_cta - 1) / per_cta);
    EXPECT_LE((total + per_cta - 1) / per_cta, kIntMax) << "flat grid";
  }
  // Workspace: partials [c][stats_ctas][2], then parameters [4][c] at a 16-byte offset, no wrap.
  EXPECT_EQ(p.params_offset % 16, 0u);
  EXPECT_GE(Wide(p.params_offset), Wide(p.c) * p.stats_ctas * 2 * acc);
  EXPECT_GE(Wide(p.workspace_bytes), Wide(p.params_offset) + Wide(p.c) * 4 * acc);
  EXPECT_LT(Wide(p.workspace_bytes), Wide(p.c) * p.stats_ctas * 2 * acc + Wide(p.c) * 4 * acc + 32);
}

TEST(BatchNormPlan, RandomShapesPlanWithinWhatTheKernelsTake) {
  constexpr int64_t kI32 = std::numeric_limits<int>::max();
  constexpr int64_t kBig = int64_t(1) << 62;
  // The edges: n * s past 2^31, c at int32's limit, products at and past int64's, empty tensors
  // (torch strides their zero-size dims as size 1), one channel, one value a position.
  const std::vector<Sizes> edges = {
      {kI32 + 2, 1}, {1, 1, kI32 + 4}, {3, 2, kI32}, {int64_t(1) << 36, 1}, {int64_t(1) << 40, 1, 5},
      {1, kI32}, {2, kI32, 1}, {1, kI32, 2}, {1, kI32 + 1, 2}, {2, int64_t(1) << 35}, {2, (int64_t(1) << 35) + 8},
      {1, 1, kBig - 1, 2}, {1, 1, kBig, 2}, {int64_t(1) << 32, 1, int64_t(1) << 32},
      {2, 3, int64_t(1) << 32, int64_t(1) << 32, 2}, {0, 3, int64_t(1) << 40, int64_t(1) << 40},
      {2, 3, 0, 5}, {2, 3, 4, 0, 5}, {0, 7}, {0, 4, 1}, {1, 1}, {5, 1, 1, 1}, {1, 9, 1, 1, 1}};
  std::mt19937_64 rng(0x6261746368);
  int planned = 0, cases = 0;
  for (const Sizes& sizes : edges)
    for (bool last : {false, true})
      for (int elem : {2, 4, 8})
        for (bool aligned : {true, false}) {
          bool planned_edge = false;
          check_plan_properties(sizes, last, elem, aligned, kSmCounts[rng() % 5], rng, &planned_edge);
          if (testing::Test::HasFailure()) return;
        }
  for (; cases < 4000; ++cases) {
    Sizes sizes(2 + rng() % 4);
    for (int64_t& d : sizes) d = random_dim(rng);
    if (sizes[1] > (1 << 16) && rng() % 2) sizes[1] = 1 + static_cast<int64_t>(rng() % 300);  // more plannable
    const bool last = rng() % 2, aligned = rng() % 4 != 0;
    const int elem = 2 << (rng() % 3);
    bool ok = false;
    check_plan_properties(sizes, last, elem, aligned, kSmCounts[rng() % 5], rng, &ok);
    if (testing::Test::HasFailure()) return;
    planned += ok;
  }
  EXPECT_GT(planned, cases / 4) << "too few shapes planned to test much";
  EXPECT_LT(planned, cases) << "no shape refused: the limits go untested";
}

// batch_norm.cuh's ChunkWalk, step for step: visit(offset) for each vector thread t reads of
// chunk k of `tile` (the apply pass's CTA; a statistics CTA walks its chunks one after another):
// the first vector's offset by the closed form, the rest by the plan's steps and wraps.
template <class Visit> void walk_chunk(const BatchNormPlan& p, int64_t tile, int64_t k, int t, Visit visit) {
  const int64_t end = std::min(p.n * p.s, (k + 1) * p.chunk);
  if (p.layout == BatchNormLayout::kChannelsFirst) {
    int64_t pos = k * p.chunk + int64_t(t) * p.vec;
    if (pos >= end) return;
    int64_t in_run = pos % p.s, offset = pos / p.s * p.c * p.s + tile * p.s + in_run;
    for (; pos < end; pos += int64_t(kBatchNormThreads) * p.vec) {
      visit(offset);
      offset += p.step_offset;
      in_run += p.step_in_run;
      if (in_run >= p.s) {
        in_run -= p.s;
        offset += p.wrap_offset;
      }
    }
  } else {
    const int w = p.tile_vectors;
    const int64_t channel = (tile * w + t % w) * p.vec;
    if (channel >= p.c) return;
    int64_t pos = k * p.chunk + t / w, offset = pos * p.c + channel;
    for (; pos < end; pos += kBatchNormThreads / w, offset += p.step_offset) visit(offset);
  }
}

TEST(BatchNormPlan, RandomSmallShapesAreWalkedOnceAndCountedRight) {
  std::mt19937_64 rng(0x77616c6b);
  for (int cases = 0; cases < 150; ++cases) {
    // Up to 2^17 elements: several chunks a channel where c is small.
    Sizes sizes(2 + rng() % 4);
    int64_t numel = 1;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(numel, 1));
      sizes[d] = rng() % 8 == 0 ? int64_t(rng() % 2) : 1 + static_cast<int64_t>(rng() % std::min<int64_t>(cap, 600));
      if (d == 1) sizes[d] = std::max<int64_t>(sizes[d] % (rng() % 2 ? 4 : 70), 1);
      numel *= std::max<int64_t>(sizes[d], 1);
    }
    const bool last = rng() % 2, aligned = rng() % 4 != 0;
    const int elem = 2 << (rng() % 3), sms = kSmCounts[rng() % 5];
    SCOPED_TRACE(testing::Message() << shape_text(sizes) << (last ? " channels-last" : " contiguous") << " elem "
                                    << elem << (aligned ? "" : " misaligned") << " sms " << sms);
    const Sizes strides = torch_strides(sizes, last);
    BatchNormPlan p;
    ASSERT_TRUE(plan_batch_norm(static_cast<int>(sizes.size()), sizes.data(), strides.data(), elem,
                                elem == 8 ? 8 : 4, aligned, sms, &p).is_ok());
    numel = p.n * p.c * p.s;
    // Every element read once by the apply pass, by a CTA of its channel's tile, in whole aligned
    // vectors of one channel (channels-first) or of the row's channels (channels-last); and the
    // values of each chunk of each channel, for the statistics CTAs' counts.
    std::vector<uint8_t> reads(static_cast<std::size_t>(numel));
    std::vector<int64_t> chunk_values(static_cast<std::size_t>(p.c * p.chunks));
    bool bad = false;
    for (int64_t tile = 0; tile < p.tiles && !bad; ++tile)
      for (int64_t k = 0; k < p.chunks && !bad; ++k)
        for (int t = 0; t < kBatchNormThreads && !bad; ++t)
          walk_chunk(p, tile, k, t, [&](int64_t offset) {
            if (bad) return;
            const int64_t ch = p.layout == BatchNormLayout::kChannelsFirst ? offset / p.s % p.c : offset % p.c;
            const bool in_x = offset >= 0 && offset + p.vec <= numel && offset % p.vec == 0;
            const bool own = p.layout == BatchNormLayout::kChannelsFirst
                                 ? ch == tile && (offset % p.s) + p.vec <= p.s
                                 : ch / (int64_t(p.tile_vectors) * p.vec) == tile && ch + p.vec <= p.c;
            EXPECT_TRUE(in_x && own) << "tile " << tile << " chunk " << k << " thread " << t << " reads " << offset;
            bad = !(in_x && own);
            for (int e = 0; e < p.vec && !bad; ++e) {
              ++reads[offset + e];
              ++chunk_values[(ch + (p.layout == BatchNormLayout::kChannelsLast ? e : 0)) * p.chunks + k];
            }
          });
    ASSERT_FALSE(bad);
    ASSERT_EQ(std::count(reads.begin(), reads.end(), uint8_t(1)), numel) << "elements read twice or never";
    // Statistics CTA r folds chunks r, r + stats_ctas, ...: its count, as the finalize pass
    // computes it (stats_cta_count), is what it folded, for every channel.
    for (int64_t ch = 0; ch < p.c; ++ch)
      for (int64_t r = 0; r < p.stats_ctas; ++r) {
        int64_t folded = 0;
        for (int64_t k = r; k < p.chunks; k += p.stats_ctas) folded += chunk_values[ch * p.chunks + k];
        ASSERT_EQ(stats_values(p, r), folded) << "channel " << ch << " statistics CTA " << r;
      }
  }
}

// batch_norm_resident.cuh's pieces, as resident_piece and resident_count lay them out: for every
// CTA of channel ch's cluster, x's base `base` bytes past a 16-byte boundary.
void check_resident_pieces(const BatchNormPlan& p, const BatchNormResidentPlan& r, int elem, int64_t ch, int base) {
  SCOPED_TRACE(testing::Message() << "channel " << ch << " base +" << base);
  int64_t pieces_seen = 0, values = 0;
  for (int rank = 0; rank < r.cluster; ++rank) {
    const int64_t first = rank * r.pieces_per_cta;
    const int64_t local = std::min(r.pieces_per_cta, r.pieces - first);
    ASSERT_GE(local, 1) << "CTA " << rank << " of the cluster holds nothing";
    int64_t cta_values = 0;
    for (int64_t i = first; i < first + local; ++i) {
      const int64_t run = i / r.parts, start = (i - run * r.parts) * r.piece;
      const int64_t len = std::min(r.piece, p.s - start);
      ASSERT_GE(len, 1) << "piece " << i << " is empty";
      const int64_t offset = ((run * p.c + ch) * p.s + start) * elem;
      const int lead = static_cast<int>((base + offset) & 15);
      // A slot holds every granule its piece touches, whatever the piece's offset.
      EXPECT_LE((lead + len * elem + 15) / 16, r.slot_granules) << "piece " << i << " overflows its slot";
      // Runs that start on granule boundaries are cut on them: whole-granule copies.
      if (base == 0 && p.s * elem % 16 == 0) {
        EXPECT_EQ(lead, 0) << "piece " << i << " cut inside a granule";
      }
      cta_values += len;
    }
    // The count the CTA's moments carry (resident_count) is what it staged.
    const int64_t last_pieces = (first + local) / r.parts - first / r.parts;
    EXPECT_EQ(local * r.piece - last_pieces * (r.parts * r.piece - p.s), cta_values) << "CTA " << rank;
    pieces_seen += local;
    values += cta_values;
  }
  // The cluster's CTAs hold consecutive pieces [0, pieces), and the pieces of a run its s values.
  EXPECT_EQ(pieces_seen, r.pieces);
  EXPECT_EQ(values, p.n * p.s) << "a channel's values staged twice or never";
}

TEST(BatchNormPlan, RandomResidentLayoutsStageEveryValueOnce) {
  std::mt19937_64 rng(0x7265736964);
  int resident = 0, cut_runs = 0, many_channels = 0;
  for (int cases = 0; cases < 1000; ++cases) {
    // Channels of 1 .. 2^19 values (the largest cluster holds 432 KiB) in runs from a value to the
    // whole channel; now and then past 2^29 channels, where c * cluster nears a launch's CTAs.
    const int rank = 2 + static_cast<int>(rng() % 4);
    Sizes sizes(rank, 1);
    const int n_kind = static_cast<int>(rng() % 3);
    // A few long runs: one CTA cannot hold a run, which is cut into pieces.
    const int bits = n_kind == 0 ? 12 + static_cast<int>(rng() % 8) : static_cast<int>(rng() % 20);
    const int64_t values = 1 + static_cast<int64_t>(rng() % (uint64_t(1) << bits));
    sizes[0] = 1 + static_cast<int64_t>(rng() % (n_kind == 0 ? 4 : n_kind == 1 ? 300 : 6000));
    sizes[1] = rng() % 6 == 0 ? std::numeric_limits<int>::max() - static_cast<int64_t>(rng() % (3u << 29))
                              : 1 + static_cast<int64_t>(rng() % 64);
    if (rank > 3) sizes[rank - 1] = 1 + static_cast<int64_t>(rng() % 3);
    if (rank > 2) sizes[2] = std::max<int64_t>(1, values / sizes[0] / sizes[rank - 1]);
    const bool last = rng() % 5 == 0, aligned = rng() % 4 != 0, shared = rng() % 8 != 0;
    const int elem = 2 << (rng() % 3), inputs = 1 + static_cast<int>(rng() % 2), sms = kSmCounts[rng() % 5];
    SCOPED_TRACE(testing::Message() << shape_text(sizes) << (last ? " channels-last" : " contiguous") << " elem "
                                    << elem << " inputs " << inputs << (shared ? "" : " outputs off x's offset"));
    BatchNormPlan p;
    const Sizes strides = torch_strides(sizes, last);
    // Refusals (past a launch's CTAs, with int32-sized c) are the first test's.
    if (!plan_batch_norm(rank, sizes.data(), strides.data(), elem, elem == 8 ? 8 : 4, aligned, sms, &p).is_ok())
      continue;
    const BatchNormResidentPlan r = plan_batch_norm_resident(p, elem, inputs, shared);
    if (p.layout != BatchNormLayout::kChannelsFirst || !shared || p.channel_count() < 2) {
      EXPECT_EQ(r.cluster, 0) << "a single-read layout where its kernel cannot apply";
      continue;
    }
    if (r.cluster == 0) continue;
    ++resident;
    cut_runs += r.parts > 1;
    many_channels += p.c > (int64_t(1) << 29);
    // The launch: c * cluster CTAs within CUDA's grid, clusters the launcher opts in to.
    ASSERT_GE(r.cluster, 1);
    ASSERT_LE(r.cluster, kBatchNormResidentClusterLimit);
    EXPECT_LE(Wide(p.c) * r.cluster, kIntMax);
    // Shared memory: x's slots, then dy's, within the largest tier the kernel is opted in to.
    EXPECT_GE(Wide(r.smem_bytes), Wide(r.pieces_per_cta) * r.slot_granules * 16 * inputs);
    EXPECT_LE(r.smem_bytes, kBatchNormResidentTiers[std::size(kBatchNormResidentTiers) - 1]);
    EXPECT_EQ(r.pieces, p.n * r.parts);
    // The kernel divides a piece's index as an int where a run has several pieces.
    if (r.parts > 1) {
      EXPECT_LE(Wide(r.pieces), kIntMax);
    }
    EXPECT_TRUE(is_pow2(r.group) && r.group <= 32) << r.group;
    for (const int64_t ch : {int64_t(0), p.c - 1})
      for (const int base : {0, 16 - elem, elem * static_cast<int>(rng() % static_cast<uint64_t>(16 / elem))}) {
        check_resident_pieces(p, r, elem, ch, base);
        if (testing::Test::HasFailure()) return;
      }
  }
  // The corners were reached: runs cut into pieces, and clusters of channels near int32's limit.
  EXPECT_GT(resident, 150);
  EXPECT_GT(cut_runs, 15);
  EXPECT_GT(many_channels, 10);
}

TEST(BatchNormPlan, RandomSyncWorkspacesNeverWrap) {
  constexpr uint64_t kHalf = std::numeric_limits<std::size_t>::max() / 2;
  std::mt19937_64 rng(0x73796e63);
  const auto pick = [&](std::initializer_list<uint64_t> edges) {
    return rng() % 2 ? edges.begin()[rng() % edges.size()] + rng() % 3 - 1 : rng() >> (rng() % 64);
  };
  for (int cases = 0; cases < 3000; ++cases) {
    const std::size_t local = pick({0, 16, kHalf, kHalf + 16, kHalf * 2});
    const int ranks = static_cast<int>(pick({0, 1, 8, uint64_t(1) << 31, uint64_t(1) << 32}));
    const int64_t channels = static_cast<int64_t>(pick({0, 1, kHalf / 24, kHalf / 24 / 8, uint64_t(1) << 63}));
    SCOPED_TRACE(testing::Message() << "local " << local << " ranks " << ranks << " channels " << channels);
    SyncBatchNormWorkspace w;
    const Status s = plan_sync_batch_norm_workspace(local, ranks, channels, &w);
    if (ranks < 1 || channels < 0) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(ranks < 1 ? "comm" : "x:"), std::string::npos) << s.message();
      continue;
    }
    const Wide exact = (Wide(local) + 15) / 16 * 16 + Wide(channels) * kSyncBatchNormPacketWidth * 8 * ranks;
    if (!s.is_ok()) {
      // Refused only past 2^62 bytes: nothing a device holds.
      EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
      EXPECT_GT(exact, Wide(1) << 62);
      continue;
    }
    // The packets sit past the local part, 16-byte aligned, and the total is exact (no wrap):
    // every rank's [channels][3] float64 packet lies inside the workspace.
    EXPECT_EQ(w.packets_offset % 16, 0u);
    EXPECT_GE(w.packets_offset, local);
    EXPECT_LT(w.packets_offset, Wide(local) + 16);
    EXPECT_TRUE(Wide(w.packet_bytes) == Wide(channels) * kSyncBatchNormPacketWidth * 8);
    EXPECT_TRUE(Wide(w.bytes) == exact) << "the workspace size wrapped";
    if (testing::Test::HasFailure()) return;
  }
}

// The kernels' walks (batch_norm.cuh: ChunkWalk, ChunkStream) step by the plan's step, wrap and
// jump instead of dividing. Followed here as the statistics pass follows them (each thread of
// statistics CTA r through chunks r, r + stats_ctas, ...), a thread must reach the vectors the
// closed form places on its path, in the same order (the order of its fold, so of the bits), and
// the threads together every vector of the tile exactly once.
using Path = std::vector<int64_t>;  // element offsets in x, in the order a thread reaches them

// Thread t of statistics CTA r: the closed form (what the kernels computed by division before).
Path closed_form_path(const BatchNormPlan& p, int64_t tile, int64_t r, int t) {
  Path out;
  const bool first = p.layout == BatchNormLayout::kChannelsFirst;
  const int w = p.tile_vectors;
  const int64_t channel = first ? tile : (tile * w + t % w) * p.vec;
  if (!first && channel >= p.c) return out;
  const int64_t step = first ? int64_t(kBatchNormThreads) * p.vec : kBatchNormThreads / w;
  for (int64_t k = r; k < p.chunks; k += p.stats_ctas) {
    const int64_t end = std::min(p.n * p.s, (k + 1) * p.chunk);
    for (int64_t pos = k * p.chunk + (first ? int64_t(t) * p.vec : t / w); pos < end; pos += step)
      out.push_back(first ? pos / p.s * p.c * p.s + channel * p.s + pos % p.s : pos * p.c + channel);
  }
  return out;
}

// The same thread as the kernels walk it: the closed form once, then steps, wraps and jumps.
Path stepped_path(const BatchNormPlan& p, int64_t tile, int64_t r, int t) {
  Path out;
  const bool first = p.layout == BatchNormLayout::kChannelsFirst;
  const int w = p.tile_vectors;
  const int64_t channel = first ? tile : (tile * w + t % w) * p.vec;
  const bool column_valid = first || channel < p.c;
  const int64_t place = first ? int64_t(t) * p.vec : t / w;
  const int64_t step = first ? int64_t(kBatchNormThreads) * p.vec : kBatchNormThreads / w;
  const auto vectors_in = [&](int64_t k) {
    const int64_t pos = k * p.chunk + place, end = std::min(p.n * p.s, (k + 1) * p.chunk);
    return column_valid && pos < end ? ceil_div(end - pos, step) : 0;
  };
  int64_t k = r, offset = 0, in_run = 0, left = vectors_in(k);
  if (left > 0) {
    const int64_t pos = k * p.chunk + place;
    in_run = first ? pos % p.s : 0;
    offset = first ? pos / p.s * (p.c * p.s) + channel * p.s + in_run : pos * p.c + channel;
  }
  // Channels-first positions move within their run and wrap onto the next channel's.
  const auto advance = [&](int64_t in_run_step, int64_t offset_step, int64_t& at_in_run, int64_t& at_offset) {
    at_offset += offset_step;
    if (!first) return;
    at_in_run += in_run_step;
    if (at_in_run >= p.s) {
      at_in_run -= p.s;
      at_offset += p.wrap_offset;
    }
  };
  int64_t start_offset = offset, start_in_run = in_run;
  bool more = column_valid && k + p.stats_ctas < p.chunks;
  while (left > 0) {
    out.push_back(offset);
    --left;
    advance(p.step_in_run, p.step_offset, in_run, offset);
    if (left == 0 && more) {
      k += p.stats_ctas;
      more = k + p.stats_ctas < p.chunks;
      advance(p.jump_in_run, p.jump_offset, start_in_run, start_offset);
      if (first) in_run = start_in_run;
      offset = start_offset;
      left = vectors_in(k);
    }
  }
  return out;
}

TEST(BatchNormPlan, WalksReachEveryVectorOnceWithoutDividing) {
  struct Case {
    Sizes sizes;
    bool channels_last;
    int elem;
    bool aligned;
    int sms;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 7}, false, 4, true, kSms},        // s = 49: runs shorter than a step
      {{5, 2, 112, 112}, false, 4, true, kSms},    // a step within a run, wrapping now and then
      {{3, 2, 112, 112}, false, 2, true, 7},       // few statistics CTAs: many jumps
      {{7, 1, 3001}, false, 4, false, kSms},       // scalar vectors, one channel, odd runs
      {{9, 3, 1030}, false, 8, true, 3},           // float64 vectors of 2
      {{4, 2, 65536}, false, 2, true, 1},          // one statistics CTA a tile, long runs
      {{33, 3, 5, 7}, true, 4, true, kSms},        // channels-last, 3 channels: scalar tiles
      {{64, 96, 7, 7}, true, 2, true, kSms},       // channels-last, vectors, one tile
      {{40, 1030, 3, 3}, true, 4, true, 5},        // channels-last, several tiles, short last tile
      {{300, 64}, false, 4, true, kSms},           // [N, C]: channels-last rows
      {{0, 4, 3, 3}, false, 4, true, kSms},        // empty batch
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "sizes[0..] " << c.sizes[0] << "x" << c.sizes[1] << " elem " << c.elem
                                    << (c.channels_last ? " channels-last" : "") << " sms " << c.sms);
    const Sizes strides = c.channels_last ? channels_last_strides(c.sizes) : contiguous_strides(c.sizes);
    BatchNormPlan p;
    const Status st = plan_batch_norm(static_cast<int>(c.sizes.size()), c.sizes.data(), strides.data(), c.elem,
                                      c.elem == 8 ? 8 : 4, c.aligned, c.sms, &p);
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (const int64_t tile : {int64_t(0), p.tiles - 1}) {
      if (tile < 0) continue;
      std::vector<int64_t> reached;
      for (int64_t r = 0; r < p.stats_ctas; ++r)
        for (int t = 0; t < kBatchNormThreads; ++t) {
          const Path stepped = stepped_path(p, tile, r, t);
          ASSERT_TRUE(stepped == closed_form_path(p, tile, r, t)) << "tile " << tile << " CTA " << r << " thread " << t;
          reached.insert(reached.end(), stepped.begin(), stepped.end());
        }
      // Every vector of the tile: channels-first, element e of the channel in run order;
      // channels-last, row q's column vector j.
      std::vector<int64_t> expected;
      if (p.layout == BatchNormLayout::kChannelsFirst) {
        for (int64_t e = 0; e < p.n * p.s; e += p.vec) expected.push_back(e / p.s * p.c * p.s + tile * p.s + e % p.s);
      } else {
        for (int64_t q = 0; q < p.n * p.s; ++q)
          for (int64_t j = tile * p.tile_vectors; j < (tile + 1) * p.tile_vectors && j * p.vec < p.c; ++j)
            expected.push_back(q * p.c + j * p.vec);
      }
      std::sort(reached.begin(), reached.end());
      std::sort(expected.begin(), expected.end());
      EXPECT_TRUE(reached == expected) << "tile " << tile << ": " << reached.size() << " vectors reached, "
                                       << expected.size() << " in the tile";
    }
  }
}
}  // namespace
}  // namespace reducekit
