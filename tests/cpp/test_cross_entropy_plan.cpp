// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_cross_entropy_rows: which batches split their rows over CTAs (and into how
// many chunks), where the backward runs on granules, and when float32 rows launch a shift class
// at a time, at the cutoffs the header names.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "plan/cross_entropy_plan.hpp"

namespace reducekit {
namespace {

constexpr int kSms = 132;  // an H100 / H200

CrossEntropyRowsQuery query(int elem_bytes, int64_t rows, int64_t classes, int64_t row_stride = -1) {
  CrossEntropyRowsQuery q;
  q.elem_bytes = elem_bytes;
  q.rows = rows;
  q.classes = classes;
  q.row_stride = row_stride < 0 ? classes : row_stride;
  q.sms = kSms;
  return q;
}

// A row's chunks are whole steps of the loop (4 vectors of 256 threads), at most 8 of them.
TEST(CrossEntropyPlan, ChunksAreWholeStepsAtMostEight) {
  constexpr int64_t kStep = int64_t(kCrossEntropyUnroll) * kCrossEntropyThreads;
  for (int64_t vectors = 1; vectors <= 40 * kStep; vectors += 37) {
    const int64_t chunk = cross_entropy_chunk_vectors(vectors);
    EXPECT_EQ(chunk % kStep, 0) << vectors;
    EXPECT_LE((vectors + chunk - 1) / chunk, kCrossEntropyChunks) << vectors;
    if (chunk > kStep) EXPECT_GT(vectors, (chunk - kStep) * kCrossEntropyChunks) << "a step less a chunk would do";
  }
}

// Fewer rows than half the SMs split; a row of one step never does.
TEST(CrossEntropyPlan, FewRowsSplit) {
  // bf16 128256 classes: 16032 vectors, 16 steps, 2 steps a chunk: 8 chunks.
  CrossEntropyRowsPlan p = plan_cross_entropy_rows(query(2, 16, 128256));
  EXPECT_EQ(p.kind, CrossEntropyRows::kSplit);
  EXPECT_EQ(p.chunks, 8);
  EXPECT_EQ(plan_cross_entropy_rows(query(2, 65, 128256)).kind, CrossEntropyRows::kSplit);
  EXPECT_EQ(plan_cross_entropy_rows(query(2, 66, 128256)).kind, CrossEntropyRows::kOneLaunch);
  // float32 50257 classes: 12565 vectors, 13 steps, 2 a chunk: 7 chunks.
  p = plan_cross_entropy_rows(query(4, 1, 50257));
  EXPECT_EQ(p.kind, CrossEntropyRows::kSplit);
  EXPECT_EQ(p.chunks, 7);
  // bf16 8192 classes are one step (1024 vectors): one CTA a row however few the rows.
  EXPECT_EQ(plan_cross_entropy_rows(query(2, 1, 8192)).kind, CrossEntropyRows::kOneLaunch);
  EXPECT_EQ(plan_cross_entropy_rows(query(2, 1, 8193)).kind, CrossEntropyRows::kSplit);
}

TEST(CrossEntropyPlan, NoSplitWhereItWouldCostMore) {
  CrossEntropyRowsQuery q = query(2, 4, 128256);
  q.smoothing_over_weights = true;  // every CTA would sum every weight
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kOneLaunch);
  q = query(2, 4, 128256);
  q.sms = 0;  // the device unknown
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kOneLaunch);
  q = query(2, 4, 128256);
  q.split_below_rows = 0;  // the tuning override
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kOneLaunch);
  q = query(2, 200, 128256);
  q.split_below_rows = 201;
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kSplit);
  // A grid of rows x chunks CTAs within int32.
  q = query(2, std::numeric_limits<int32_t>::max() / 8 + 1, 128256);
  q.split_below_rows = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kOneLaunch);
}

// The backward runs on granules where the gradient rows share the logits rows' offsets, unless
// the batch splits; the forward never does.
TEST(CrossEntropyPlan, BackwardOnGranules) {
  CrossEntropyRowsQuery q = query(2, 4096, 50257);
  q.backward = true;
  q.gradient_at_logits_offsets = true;
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kGranules);
  q.gradient_at_logits_offsets = false;
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kOneLaunch);
  q = query(2, 8, 50257);
  q.backward = q.gradient_at_logits_offsets = true;
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kSplit);
  q = query(2, 4096, 50257);
  q.gradient_at_logits_offsets = true;  // a forward
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kOneLaunch);
}

// Float32 rows launch a shift class at a time where they share one shift (period 1) or reach
// 32 MiB; 16-bit rows always take one launch.
TEST(CrossEntropyPlan, Float32ShiftClasses) {
  CrossEntropyRowsPlan p = plan_cross_entropy_rows(query(4, 4096, 50264));
  EXPECT_EQ(p.kind, CrossEntropyRows::kShiftClasses);
  EXPECT_EQ(p.period, 1);
  p = plan_cross_entropy_rows(query(4, 4096, 50257));  // 823 MB, rows 4 bytes apart mod 16
  EXPECT_EQ(p.kind, CrossEntropyRows::kShiftClasses);
  EXPECT_EQ(p.period, 4);
  p = plan_cross_entropy_rows(query(4, 4096, 50258));  // 8 bytes apart mod 16
  EXPECT_EQ(p.period, 2);
  // 100 rows of 50257: 20 MB, under 32 MiB: one launch (not split: 100 >= 66).
  EXPECT_EQ(plan_cross_entropy_rows(query(4, 100, 50257)).kind, CrossEntropyRows::kOneLaunch);
  // 167 rows of 50257: 33.6 MB, over 32 MiB.
  EXPECT_EQ(plan_cross_entropy_rows(query(4, 167, 50257)).kind, CrossEntropyRows::kShiftClasses);
  CrossEntropyRowsQuery q = query(4, 100, 50257);
  q.class_launch_from_bytes = 0;  // the tuning override
  EXPECT_EQ(plan_cross_entropy_rows(q).kind, CrossEntropyRows::kShiftClasses);
  // A stride, not the row length, sets the period.
  EXPECT_EQ(plan_cross_entropy_rows(query(4, 4096, 50257, 50260)).period, 1);
  for (int elem : {2, 8})
    for (int64_t classes : {50257, 50264})
      EXPECT_EQ(plan_cross_entropy_rows(query(elem, 4096, classes)).kind, CrossEntropyRows::kOneLaunch)
          << elem << " " << classes;
}

}  // namespace
}  // namespace reducekit
