// SPDX-License-Identifier: Apache-2.0
// Element types, their accumulation types, the conversions between them, and the small device
// helpers every engine shares.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace reducekit::kernels {

// Accumulate in float32, or float64 for float64 inputs (DESIGN.md, Numerics).
template <typename T> struct AccumulateType { using type = float; };
template <> struct AccumulateType<double> { using type = double; };
template <typename T> using acc_t = typename AccumulateType<T>::type;

template <typename Acc, typename T> __device__ __forceinline__ Acc to_acc(T v) { return static_cast<Acc>(v); }
template <> __device__ __forceinline__ float to_acc<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<float, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T, typename Acc> __device__ __forceinline__ T from_acc(Acc v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_acc<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

// Programmatic dependent launch (a kernel launched with the programmatic stream serialization
// attribute may start before the one ahead of it ends): the launch of the next kernel may begin,
// and: wait for the kernel ahead to end with its writes visible. Both do nothing in a kernel
// launched without the attribute, or with no kernel after it that has it.
__device__ __forceinline__ void allow_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// A value another CTA published (a partial statistic, read after its ticket or counter says it is
// there), loaded at L2 (ld.global.cg) word by word: L1 is not coherent across SMs.
template <typename S> __device__ __forceinline__ S load_partial(const S* p) {
  static_assert(sizeof(S) % 4 == 0, "partials are whole 32-bit words");
  uint32_t w[sizeof(S) / 4];
  const auto* src = reinterpret_cast<const unsigned int*>(p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(S) / 4); ++i) w[i] = __ldcg(src + i);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// Publishes a partial for load_partial, word by word: the padding words of a statistic (argmax's
// float and int64) are written too, so no reader sees memory nobody wrote.
template <typename S> __device__ __forceinline__ void store_partial(S* p, const S& s) {
  static_assert(sizeof(S) % 4 == 0, "partials are whole 32-bit words");
  uint32_t w[sizeof(S) / 4] = {};
  memcpy(w, &s, sizeof(S));
  auto* dst = reinterpret_cast<unsigned int*>(p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(S) / 4); ++i) dst[i] = w[i];
}

// exp of a value <= 0 relative to a max: ex2.approx is accurate to 2 ulp there and runs on
// the special-function unit, leaving the FMA pipe to the rest. Flushing results below 2^-126
// to zero is harmless for probabilities. The subtraction happens before the scaling (by the
// caller), so large inputs (1e4) lose nothing to rounding of x * log2(e).
__device__ __forceinline__ float fast_exp(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v * 1.4426950408889634f));
  return r;
}
__device__ __forceinline__ double fast_exp(double v) { return exp(v); }

// Products the compiler may not contract into an FMA with a following add: fma(a, x, b * y)
// and fma(b, y, a * x) differ in the last bit, so a merge written a * x + b * y would not be
// bitwise commutative, and the lanes of a butterfly would end with different statistics.
__device__ __forceinline__ float product_unfused(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double product_unfused(double a, double b) { return __dmul_rn(a, b); }

// Folds f(0) .. f(N-1) with `op` in four interleaved chains, then pairwise: independent
// chains keep the pipes busy where one chain would wait on every step. The order is fixed by
// N alone, so results stay deterministic.
template <int N, class Op, class F> __device__ __forceinline__ auto fold_chains(Op op, F f) {
  constexpr int P = N < 4 ? N : 4;
  decltype(f(0)) part[P];
#pragma unroll
  for (int p = 0; p < P; ++p) part[p] = f(p);
#pragma unroll
  for (int j = P; j < N; ++j) part[j % P] = op(part[j % P], f(j));
#pragma unroll
  for (int w = 1; w < P; w *= 2)
#pragma unroll
    for (int p = 0; p + w < P; p += 2 * w) part[p] = op(part[p], part[p + w]);
  return part[0];
}
struct Plus {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct Max {  // fmax: a NaN operand is skipped (callers that need NaN carry it elsewhere)
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return fmax(a, b); }
};

// Once per row: the precise log costs nothing and keeps log_softmax within an ulp or two.
__device__ __forceinline__ float precise_log(float v) { return logf(v); }
__device__ __forceinline__ double precise_log(double v) { return log(v); }

template <typename Acc> __device__ __forceinline__ Acc negative_infinity() {
  return -static_cast<Acc>(INFINITY);
}

}  // namespace reducekit::kernels
