// Element types, their accumulation types, and the conversions between them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

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

// exp of a value <= 0 relative to the row max: the hardware ex2 path is accurate to a few ulp
// there, and keeps the special-function unit, not the FMA pipe, busy (two exps per element).
__device__ __forceinline__ float fast_exp(float v) { return __expf(v); }
__device__ __forceinline__ double fast_exp(double v) { return exp(v); }

// Once per row: the precise log costs nothing and keeps log_softmax within an ulp or two.
__device__ __forceinline__ float precise_log(float v) { return logf(v); }
__device__ __forceinline__ double precise_log(double v) { return log(v); }

template <typename Acc> __device__ __forceinline__ Acc negative_infinity() {
  return -static_cast<Acc>(INFINITY);
}

}  // namespace reducekit::kernels
