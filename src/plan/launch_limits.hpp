// SPDX-License-Identifier: Apache-2.0
// Limits of a kernel launch that the planners and launchers share.
#pragma once

#include <cstdint>

namespace reducekit {

// The most CTAs a launch's x dimension takes (2^31 - 1).
constexpr int64_t kMaxGridX = 0x7fffffff;

}  // namespace reducekit
