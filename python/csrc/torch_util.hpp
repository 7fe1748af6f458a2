// Helpers shared by the torch.ops.reducekit adapters: at::Tensor -> TensorView, and a failed
// Status -> a Python exception carrying the core's message (which names the argument).
#pragma once

#include <ATen/ATen.h>

#include "reducekit/reducekit.hpp"

namespace reducekit_torch {

inline reducekit::DType to_dtype(at::ScalarType t, const char* name) {
  switch (t) {
    case at::kFloat: return reducekit::DType::kFloat32;
    case at::kHalf: return reducekit::DType::kFloat16;
    case at::kBFloat16: return reducekit::DType::kBFloat16;
    case at::kDouble: return reducekit::DType::kFloat64;
    case at::kLong: return reducekit::DType::kInt64;
    default: TORCH_CHECK(false, name, ": expected float32, float16, bfloat16 or float64, got ", t);
  }
}

inline reducekit::TensorView to_view(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() <= reducekit::kMaxRank, name, ": rank ", t.dim(), " exceeds ", reducekit::kMaxRank);
  reducekit::TensorView v;
  v.data = t.data_ptr();
  v.dtype = to_dtype(t.scalar_type(), name);
  v.rank = static_cast<int>(t.dim());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  v.device = t.is_cuda() ? t.get_device() : reducekit::kHostDevice;
  return v;
}

inline void throw_if_failed(const reducekit::Status& s) { TORCH_CHECK(s.is_ok(), s.message()); }

inline void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, ": expected a CUDA tensor, got one on ", t.device());
}

}  // namespace reducekit_torch
