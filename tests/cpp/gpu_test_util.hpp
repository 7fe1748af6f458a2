// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the GPU tests: device detection, device buffers, host-side dtype
// conversion and the dtype-aware tolerance DESIGN.md sets.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reducekit/tuning.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit::testing_util {

inline bool gpu_available() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

#define REDUCEKIT_REQUIRE_GPU()                                                   \
  do {                                                                            \
    if (!::reducekit::testing_util::gpu_available())                              \
      GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped";         \
  } while (0)

#define REDUCEKIT_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// Owns a device allocation of `bytes` bytes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes ? bytes : 1) != cudaSuccess) ptr_ = nullptr;
  }
  // A copy of `host` on the device (null, like a failed allocation, if the copy fails).
  template <typename T> explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (ptr_ != nullptr && cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(ptr_);
      ptr_ = nullptr;
    }
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_;
};

template <typename T> DType dtype_of();
template <> inline DType dtype_of<float>() { return DType::kFloat32; }
template <> inline DType dtype_of<double>() { return DType::kFloat64; }
template <> inline DType dtype_of<__half>() { return DType::kFloat16; }
template <> inline DType dtype_of<__nv_bfloat16>() { return DType::kBFloat16; }
template <> inline DType dtype_of<int64_t>() { return DType::kInt64; }

template <typename T> T from_double(double v) { return static_cast<T>(v); }
template <> inline __half from_double<__half>(double v) { return __float2half_rn(static_cast<float>(v)); }
template <> inline __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}
template <typename T> double to_double(T v) { return static_cast<double>(v); }
template <> inline double to_double<__half>(__half v) { return __half2float(v); }
template <> inline double to_double<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// Mantissa bits (without the implicit one) and smallest normal exponent of each type.
template <typename T> struct FloatTraits;
template <> struct FloatTraits<float> { static constexpr int kMantissa = 23, kMinExp = -126; };
template <> struct FloatTraits<double> { static constexpr int kMantissa = 52, kMinExp = -1022; };
template <> struct FloatTraits<__half> { static constexpr int kMantissa = 10, kMinExp = -14; };
template <> struct FloatTraits<__nv_bfloat16> { static constexpr int kMantissa = 7, kMinExp = -126; };

template <typename T> double ulp_at(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, FloatTraits<T>::kMinExp);
  return std::ldexp(1.0, exponent - FloatTraits<T>::kMantissa);
}

// DESIGN.md's tolerances: 16-bit results within two ulps of the reference, float32 and float64
// within a relative 1e-5 / 1e-12; on top, an absolute allowance for the accumulation type's
// rounding, proportional to `scale`: the magnitude of the terms that produced the value (the
// row's largest |output| for forward ops, |y| * (|dy| + sum|y dy|) and the like for backward
// ops, where the result can be a small difference of large terms).
template <typename T> bool close_enough(double got, double want, double scale) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isnan(got)) return false;
  if (got == to_double(from_double<T>(want))) return true;  // the correctly rounded value (or its overflow)
  if (std::isinf(want)) return got == want;
  const double err = std::fabs(got - want);
  const double accumulate = (sizeof(T) == 8 ? 1e-13 : 4e-6) * scale;
  if constexpr (sizeof(T) == 2) return err <= 2.0 * ulp_at<T>(want) + accumulate;
  const double rtol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  return err <= rtol * std::fabs(want) + accumulate;
}

// Whether two images hold the same bytes: bit-for-bit equality, where == fails on NaN (a
// poisoned element, a NaN result) and passes +0 against -0.
template <typename A> bool same_bits(const std::vector<A>& x, const std::vector<A>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(A)) == 0;
}

// Fills `n` doubles from a named distribution, drawn with a fixed seed.
inline std::vector<double> make_values(int64_t n, const std::string& kind, uint32_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    x = normal(gen);
    if (kind == "large") x *= 1e4;
  }
  return v;
}

// rows x cols, row r at element offset + r * stride of its buffer (sliced or offset rows).
struct RowLayout {
  int64_t rows, cols, stride, offset;
  int64_t span() const { return offset + (rows - 1) * stride + cols; }
};

// A 2-d view of such rows on device 0.
inline TensorView row_view(void* base, DType dtype, const RowLayout& l) {
  TensorView v;
  v.data = static_cast<char*>(base) + l.offset * static_cast<int64_t>(dtype_size(dtype));
  v.dtype = dtype;
  v.rank = 2;
  v.sizes[0] = l.rows;
  v.sizes[1] = l.cols;
  v.strides[0] = l.stride;
  v.strides[1] = 1;
  v.device = 0;
  return v;
}

// Split-row workspaces in tests: the arrival counters zeroed and the chunk statistics poisoned,
// so that after the call expect_split_ran sees whether the split kernel wrote any (a silent
// fallback to the stream kernel leaves them untouched) and left every counter zero again.
inline void prepare_split_workspace(void* workspace, std::size_t zeroed_bytes, std::size_t bytes) {
  REDUCEKIT_CUDA_OK(cudaMemset(workspace, 0, zeroed_bytes));
  REDUCEKIT_CUDA_OK(cudaMemset(static_cast<char*>(workspace) + zeroed_bytes, 0xff, bytes - zeroed_bytes));
}
// The same with the counters apart (Workspace::tickets).
inline void expect_split_ran(const void* tickets, std::size_t ticket_bytes, const void* stats, std::size_t stat_bytes) {
  std::vector<unsigned char> counters(ticket_bytes), image(stat_bytes);
  REDUCEKIT_CUDA_OK(cudaMemcpy(counters.data(), tickets, ticket_bytes, cudaMemcpyDeviceToHost));
  REDUCEKIT_CUDA_OK(cudaMemcpy(image.data(), stats, stat_bytes, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(std::all_of(counters.begin(), counters.end(), [](unsigned char b) { return b == 0; }))
      << "the call left an arrival counter nonzero";
  EXPECT_TRUE(std::any_of(image.begin(), image.end(), [](unsigned char b) { return b != 0xff; }))
      << "no chunk statistic was written: the split kernel did not run";
}
inline void expect_split_ran(const void* workspace, std::size_t zeroed_bytes, std::size_t bytes) {
  expect_split_ran(workspace, zeroed_bytes, static_cast<const char*>(workspace) + zeroed_bytes, bytes - zeroed_bytes);
}

// A planner override (reducekit/tuning.hpp, read on every launch) set while a test runs, so the test
// reaches a path the default plan does not take for its rows.
class ScopedTuning {
 public:
  ScopedTuning(const char* name, int64_t value) : name_(name) { EXPECT_TRUE(set_tuning(name, value).is_ok()) << name; }
  ~ScopedTuning() { set_tuning(name_, std::nullopt); }
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;

 private:
  const char* name_;
};

}  // namespace reducekit::testing_util
