// SPDX-License-Identifier: Apache-2.0
// TensorView: a non-owning description of a strided tensor in device or host memory.
// Sizes and strides are int64 and counted in elements, so tensors past 2^31 elements work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace reducekit {

enum class DType : int8_t { kFloat32, kFloat16, kBFloat16, kFloat64, kInt64 };

constexpr int kMaxRank = 8;
constexpr int kHostDevice = -1;  // TensorView::device for memory the CPU owns

inline constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt64: return 8;
  }
  return 0;
}

inline constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

// Named explicitly: a DType cast from an out-of-range integer is neither floating nor int64, and
// must fail the dtype checks rather than reach a kernel with dtype_size() == 0.
inline constexpr bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int device = kHostDevice;  // CUDA device ordinal, or kHostDevice

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= sizes[d];
    return n;
  }

  // True when the elements are laid out densely in row-major order (size-1 dims ignored). A
  // tensor with no elements is contiguous whatever its strides (torch gives [5, 0, 2] the
  // strides [2, 2, 1]).
  bool is_contiguous() const {
    if (numel() == 0) return true;
    int64_t expected = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (sizes[d] == 1) continue;
      if (strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
};

// Builds a row-major contiguous view; rank is sizes.size() (callers keep it <= kMaxRank).
inline TensorView make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                                       int device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(sizes.size() <= kMaxRank ? sizes.size() : kMaxRank);
  int d = 0;
  for (int64_t s : sizes) {
    if (d == v.rank) break;
    v.sizes[d++] = s;
  }
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.strides[i] = stride;
    stride *= v.sizes[i];
  }
  return v;
}

}  // namespace reducekit
