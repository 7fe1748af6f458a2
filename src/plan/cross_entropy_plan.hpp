// SPDX-License-Identifier: Apache-2.0
// How cross-entropy's row kernels (src/kernels/cross_entropy.cuh) cover a batch of class-index
// rows: each row split over several CTAs, one CTA a row on the granules the row touches (the
// backward), or the row loop (CTAs looping over rows) in one launch or in a launch a shift class.
// A pure function of the shapes, the options and the device's SM count: src/ops/cross_entropy.cu
// launches the plan, tests/cpp/test_cross_entropy_plan.cpp pins it. Every choice gives a row the
// same bits, so the plan may depend on the batch. (The staged kernel's rows are planned as the
// softmax family's: cross_entropy_staged_bands in row_kernel_plan.hpp.)
#pragma once

#include <cstdint>
#include <optional>

namespace reducekit {

constexpr int kCrossEntropyThreads = 256;
constexpr int kCrossEntropyUnroll = 4;  // vectors a thread loads a step of the row loop
// A row's fold in at most this many chunks: a portable cluster's CTAs, one chunk each.
constexpr int kCrossEntropyChunks = 8;

// Vectors a chunk of a row of `vectors` 16-byte vectors: whole steps of the row loop
// (kCrossEntropyUnroll vectors a thread), as few as keep the chunks to kCrossEntropyChunks.
constexpr int64_t cross_entropy_chunk_vectors(int64_t vectors) {
  const int64_t step = int64_t(kCrossEntropyUnroll) * kCrossEntropyThreads;
  const int64_t steps = vectors > step ? (vectors + step - 1) / step : 1;
  return (steps + kCrossEntropyChunks - 1) / kCrossEntropyChunks * step;
}

// Float32 logits from this many bytes run the row loop a launch a shift class where their rows
// start at several offsets in a granule (below, p - 1 more launches cost more than they save).
constexpr int64_t kCrossEntropyClassLaunchFromBytes = int64_t(32) << 20;

enum class CrossEntropyRows {
  kSplit,         // each row over `chunks` CTAs: batches of fewer rows than half the SMs
  kGranules,      // backward: one CTA a row on the row's granules, the dlogits at the logits' offsets
  kOneLaunch,     // the row loop, every row on the kernel that reads each row's shift
  kShiftClasses,  // the row loop, rows c, c + period, ... a launch, on the kernel for their shift
};

struct CrossEntropyRowsPlan {
  CrossEntropyRows kind = CrossEntropyRows::kOneLaunch;
  int chunks = 0;  // kSplit: CTAs a row
  int period = 0;  // kShiftClasses: launches (shift classes), 1 where every row shares its shift
};

struct CrossEntropyRowsQuery {
  int elem_bytes = 4;
  int64_t rows = 0, classes = 0;
  int64_t row_stride = 0;              // of the logits, in elements
  bool backward = false;
  bool gradient_at_logits_offsets = false;  // backward: every dlogits row at its logits row's granule offset
  bool smoothing_over_weights = false;      // label smoothing with class weights
  int sms = 0;                              // 0: unknown (no split)
  std::optional<int64_t> split_below_rows;         // split batches of fewer rows (else sms / 2)
  std::optional<int64_t> class_launch_from_bytes;  // else kCrossEntropyClassLaunchFromBytes
};

// Split rows where the batch has fewer rows than half the SMs (the row loop would leave most SMs
// idle; from about one row an SM the row loop ran faster), unless a row is one step of the loop, or
// label smoothing over class weights (each CTA would read every weight for their sum). Else the
// backward on granules where the gradient rows share the logits rows' offsets; else the row loop, a
// launch a shift class for float32 (the kernel for a known shift skips the run-time word selects)
// where the rows share one offset or the logits reach class_launch_from_bytes, one launch
// otherwise.
CrossEntropyRowsPlan plan_cross_entropy_rows(const CrossEntropyRowsQuery& q);

}  // namespace reducekit
