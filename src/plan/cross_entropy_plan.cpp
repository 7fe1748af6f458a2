// SPDX-License-Identifier: Apache-2.0
// Host planning of cross-entropy's row kernels (see cross_entropy_plan.hpp).
#include "plan/cross_entropy_plan.hpp"

#include <cstdint>
#include <limits>

#include "plan/reduction_plan.hpp"

namespace reducekit {
namespace {

// CTAs a row of the split kernels, or 0 where the batch does not split.
int split_chunks(const CrossEntropyRowsQuery& q) {
  const int vec = 16 / q.elem_bytes;
  const int64_t vectors = (q.classes + vec - 1) / vec;
  const int64_t chunk_vectors = cross_entropy_chunk_vectors(vectors);
  const int64_t chunks = (vectors + chunk_vectors - 1) / chunk_vectors;
  if (chunks < 2 || q.smoothing_over_weights || q.rows > std::numeric_limits<int32_t>::max() / chunks) return 0;
  const int64_t below = q.split_below_rows.value_or(q.sms / 2);
  return q.rows < below ? static_cast<int>(chunks) : 0;
}

}  // namespace

CrossEntropyRowsPlan plan_cross_entropy_rows(const CrossEntropyRowsQuery& q) {
  CrossEntropyRowsPlan plan;
  if (const int chunks = split_chunks(q); chunks > 0) {
    plan.kind = CrossEntropyRows::kSplit;
    plan.chunks = chunks;
    return plan;
  }
  if (q.backward && q.gradient_at_logits_offsets) {
    plan.kind = CrossEntropyRows::kGranules;
    return plan;
  }
  const int64_t from_bytes = q.class_launch_from_bytes.value_or(kCrossEntropyClassLaunchFromBytes);
  const int period = shift_period(q.row_stride, q.elem_bytes);
  if (q.elem_bytes == 4 && (period == 1 || q.rows * q.classes * q.elem_bytes >= from_bytes)) {
    plan.kind = CrossEntropyRows::kShiftClasses;
    plan.period = period;
  }
  return plan;
}

}  // namespace reducekit
