// SPDX-License-Identifier: Apache-2.0
// The index rules of cross-entropy's staged-granule kernels (kernels::GranuleStage, used by the
// kShiftStaged kernels), on the host: for 16-bit rows of every length up to a few thousand and
// vocabulary lengths, at each of the eight offsets, the granules a step copies lie inside the row,
// every vector the kernel funnels finds both its granules copied in the same step (its own floor
// granule by its lane, the next by the lane holding the next vector or, for a warp's last lane,
// by that lane's extra copy), and every other vector is an edge vector with a slot of its own.
// No GPU needed.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kernels/cross_entropy.cuh"

namespace reducekit {
namespace {

using Stage = kernels::GranuleStage<__nv_bfloat16>;
constexpr int VEC = Stage::VEC;

// [first, first + VEC) within [0, len).
bool granule_in_row(int64_t first, int64_t len) { return first >= 0 && first + VEC <= len; }

void check_row(int64_t len, int shift, int threads) {
  SCOPED_TRACE(testing::Message() << "len " << len << " shift " << shift << " threads " << threads);
  const int64_t vectors = (len + VEC - 1) / VEC;
  std::set<int> slots;  // edge slots taken
  std::set<int64_t> candidates;
  for (int c = 0; c < 3; ++c) {
    const int64_t v = Stage::edge_candidate(c, vectors);
    if (v >= 0) candidates.insert(v);
  }
  // The lanes past the row's end copy nothing; the others only granules inside the row.
  for (int64_t v = 0; v < vectors + 2 * threads; ++v) {
    const int64_t e0 = v * VEC;
    const int lane = static_cast<int>(v % threads % 32);
    if (Stage::copies_floor(e0, len, shift)) {
      ASSERT_TRUE(granule_in_row(e0 - shift, len)) << "vector " << v << " copies a granule outside the row";
      ASSERT_LT(v, vectors);
    }
    if (lane == 31 && Stage::copies_past(e0, len, shift))
      ASSERT_TRUE(granule_in_row(e0 + VEC - shift, len)) << "vector " << v << " copies a granule outside the row";
    if (v >= vectors) continue;
    if (Stage::inside(v, len, shift)) {
      ASSERT_TRUE(Stage::copies_floor(e0, len, shift)) << "vector " << v << ": its floor granule is not copied";
      if (shift != 0) {
        // The next granule: the next lane's floor (it holds vector v + 1 in the same step), or
        // the warp's last lane's own extra copy.
        const bool copied = lane == 31 ? Stage::copies_past(e0, len, shift) : Stage::copies_floor(e0 + VEC, len, shift);
        ASSERT_TRUE(copied) << "vector " << v << ": the granule after its floor is not copied";
      }
    } else {
      ASSERT_TRUE(candidates.count(v)) << "vector " << v << " is neither inside nor an edge vector";
      ASSERT_TRUE(slots.insert(Stage::edge_slot(v, vectors)).second) << "vector " << v << " shares an edge slot";
    }
  }
}

TEST(CrossEntropyStage, StepsCopyTheGranulesEveryVectorNeedsAndEdgesTakeTheRest) {
  std::vector<int64_t> lengths;
  for (int64_t len = 1; len <= 2100; ++len) lengths.push_back(len);
  for (const int64_t len : {4099, 8191, 8192, 8193, 50257, 128256, 128257, 151937}) lengths.push_back(len);
  for (const int threads : {64, 256})
    for (const int64_t len : lengths)
      for (int shift = 0; shift < VEC; ++shift) {
        check_row(len, shift, threads);
        if (testing::Test::HasFatalFailure()) return;
      }
}

}  // namespace
}  // namespace reducekit
