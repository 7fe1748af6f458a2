// SPDX-License-Identifier: Apache-2.0
// The planners' overflow-checked product: sizes and strides come from the caller, and a wrapped
// product can make a bad shape look small, empty or mergeable.
#pragma once

#include <cstdint>
#include <limits>

namespace reducekit {

// a * b for non-negative a and b; false (and *out untouched) where it passes int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace reducekit
