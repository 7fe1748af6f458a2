// SPDX-License-Identifier: Apache-2.0
// The softmax family's four ops as one enum, for the row and column GPU tests.
#pragma once

#include "reducekit/softmax.hpp"

namespace reducekit::softmax_test {

enum class Op { kSoftmax, kLogSoftmax, kSoftmaxBackward, kLogSoftmaxBackward };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kSoftmax: return "softmax";
    case Op::kLogSoftmax: return "log_softmax";
    case Op::kSoftmaxBackward: return "softmax_backward";
    default: return "log_softmax_backward";
  }
}

inline bool is_backward(Op op) { return op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward; }

// `op` over dim 1 on the default stream: forward ops read a, backward ops a (y) and b (dy).
// With `ws`, the forward ops take the workspace overloads.
inline Status run(Op op, const TensorView& a, const TensorView& b, const TensorView& out,
                  const Workspace* ws = nullptr) {
  switch (op) {
    case Op::kSoftmax: return ws ? softmax(a, out, 1, *ws, nullptr) : softmax(a, out, 1, nullptr);
    case Op::kLogSoftmax: return ws ? log_softmax(a, out, 1, *ws, nullptr) : log_softmax(a, out, 1, nullptr);
    case Op::kSoftmaxBackward: return softmax_backward(a, b, out, 1, nullptr);
    default: return log_softmax_backward(a, b, out, 1, nullptr);
  }
}

}  // namespace reducekit::softmax_test
