// SPDX-License-Identifier: Apache-2.0
// Cross-entropy kernels (include/reducekit/loss.hpp): one CTA a row, CTAs looping over rows.
//
// Forward: each thread folds its 16-byte vectors of the row (vectors tid, tid + threads, ...,
// kCrossEntropyUnroll loads in flight) into softmax's (max, sum of exp) statistic and, with label
// smoothing, into sum_j w[j] z[j]; the CTA merges them in a fixed order (butterflies, then the
// warps in order: block_reduce), and thread 0 writes the row's loss and logsumexp. Backward: each
// element's gradient from its row's saved logsumexp, target and upstream gradient; no reduction.
// Rows at any alignment move as shifted 16-byte vectors (vector_io.cuh); the thread-to-element
// layout depends on the row length alone, so a row's results do not depend on the batch.
#pragma once

#include <cstdint>

#include "kernels/numeric.cuh"
#include "kernels/row_engine.cuh"
#include "kernels/softmax_ops.cuh"
#include "kernels/vector_io.cuh"

namespace reducekit::kernels {

constexpr int kCrossEntropyThreads = 256;
constexpr int kCrossEntropyUnroll = 4;

template <typename T> struct CrossEntropyArgs {
  using Acc = acc_t<T>;
  const T* logits;
  int64_t logits_stride;
  const int64_t* target;
  const Acc* weight;  // [classes], or null (every class weighs 1)
  int64_t rows;
  int64_t classes;
  int64_t ignore_index;
  Acc smoothing;  // label smoothing
  Acc z_scale;    // lse_square_scale
  Acc softcap;    // 0: none
  Acc* loss;      // forward: [rows]
  Acc* lse;       // forward: [rows]
  const Acc* saved_lse;  // backward: [rows]
  const Acc* grad;       // backward: [rows]
  T* dlogits;            // backward
  int64_t dlogits_stride;
};

template <typename Acc> __device__ __forceinline__ Acc soft_capped(Acc x, Acc softcap) {
  return softcap > Acc(0) ? softcap * tanh(x / softcap) : x;
}

// The (soft-capped) values of the VEC elements from e0 of a row of `len`; past the end, `pad`.
template <typename T, int VEC, typename Acc>
__device__ __forceinline__ void load_capped(const T* row, int64_t e0, int64_t len, Acc softcap, Acc pad,
                                            Acc (&z)[VEC]) {
  if (e0 + VEC <= len) {
    const Bytes16 b = load_vector16<T, VEC>(row, e0, len);
    T v[VEC];
    memcpy(v, &b, 16);
#pragma unroll
    for (int e = 0; e < VEC; ++e) z[e] = soft_capped(to_acc<Acc>(v[e]), softcap);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) z[e] = e0 + e < len ? soft_capped(to_acc<Acc>(row[e0 + e]), softcap) : pad;
  }
}

// sum_j w[j] over the classes, the same for every row: once a CTA, where the smoothing term needs it.
template <typename Acc>
__device__ __forceinline__ Acc class_weight_sum(const Acc* weight, int64_t classes, StatVec<Acc, 1>* slots) {
  if (weight == nullptr) return Acc(classes);
  Acc s = Acc(0);
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += weight[j];
  return block_reduce<RowSum<Acc>>({{s}}, slots).w[0];
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads) cross_entropy_forward_kernel(CrossEntropyArgs<T> a) {
  using Acc = acc_t<T>;
  using Lse = SoftmaxForwardOp<T, false>;  // its (max, sum of exp) statistic and merge
  constexpr int VEC = 16 / sizeof(T);
  __shared__ typename Lse::Stat lse_slots[33];
  __shared__ StatVec<Acc, 1> sum_slots[33];
  const bool smooth = a.smoothing > Acc(0);
  const Acc weight_sum = smooth ? class_weight_sum(a.weight, a.classes, sum_slots) : Acc(0);
  const int64_t vectors = (a.classes + VEC - 1) / VEC;

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = a.logits + row * a.logits_stride;
    typename Lse::Stat stat = Lse::identity();
    Acc wz = Acc(0);  // sum_j w[j] z[j], smoothing only
    for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += int64_t(kCrossEntropyUnroll) * blockDim.x) {
      Acc z[kCrossEntropyUnroll][VEC];
#pragma unroll
      for (int u = 0; u < kCrossEntropyUnroll; ++u)
        load_capped<T, VEC>(x, (v0 + int64_t(u) * blockDim.x) * VEC, a.classes, a.softcap, negative_infinity<Acc>(), z[u]);
#pragma unroll
      for (int u = 0; u < kCrossEntropyUnroll; ++u) {
        Acc v[1][VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[0][e] = z[u][e];
        stat = Lse::merge(stat, Lse::template fold<VEC>(v));  // pads (-inf) add exp(-inf) = 0
        if (smooth) {
          const int64_t e0 = (v0 + int64_t(u) * blockDim.x) * VEC;
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            if (e0 + e < a.classes) wz += (a.weight ? a.weight[e0 + e] : Acc(1)) * z[u][e];
        }
      }
    }
    stat = block_reduce<Lse>(stat, lse_slots);
    if (smooth) wz = block_reduce<RowSum<Acc>>({{wz}}, sum_slots).w[0];
    if (threadIdx.x == 0) {
      const Acc lse = stat.w[0] + precise_log(stat.w[1]);  // -inf for an all -inf row
      const int64_t t = a.target[row];
      Acc loss = Acc(0);
      if (t != a.ignore_index) {
        if (t < 0 || t >= a.classes) {
          loss = Acc(NAN);  // read nothing out of bounds; the row's loss says the target was bad
        } else {
          const Acc zt = soft_capped(to_acc<Acc>(x[t]), a.softcap);
          loss = (Acc(1) - a.smoothing) * (a.weight ? a.weight[t] : Acc(1)) * (lse - zt);
          if (smooth) loss += a.smoothing / Acc(a.classes) * (weight_sum * lse - wz);
          if (a.z_scale != Acc(0)) loss += a.z_scale * lse * lse;
        }
      }
      a.loss[row] = loss;
      a.lse[row] = lse;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads) cross_entropy_backward_kernel(CrossEntropyArgs<T> a) {
  using Acc = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  __shared__ StatVec<Acc, 1> sum_slots[33];
  const bool smooth = a.smoothing > Acc(0);
  const Acc weight_sum = smooth ? class_weight_sum(a.weight, a.classes, sum_slots) : Acc(0);
  const int64_t vectors = (a.classes + VEC - 1) / VEC;

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = a.logits + row * a.logits_stride;
    T* dx = a.dlogits + row * a.dlogits_stride;
    const int64_t t = a.target[row];
    const bool ignored = t == a.ignore_index, bad = !ignored && (t < 0 || t >= a.classes);
    const Acc g = a.grad[row], lse = a.saved_lse[row];
    // d loss / d z_j = p_j * (target + smooth * W + 2 s g lse) - target [j == t] - smooth * w[j],
    // with target = g (1 - ls) w[t], smooth = g ls / classes, W = sum_j w[j], p_j = exp(z_j - lse).
    const Acc target_part = ignored || bad ? Acc(0) : g * (Acc(1) - a.smoothing) * (a.weight ? a.weight[t] : Acc(1));
    const Acc smooth_part = g * a.smoothing / Acc(a.classes);
    const Acc p_factor = target_part + smooth_part * weight_sum + Acc(2) * a.z_scale * g * lse;
    const Acc fill = bad ? Acc(NAN) : Acc(0);  // ignored rows: 0; bad targets: NaN
    for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += int64_t(kCrossEntropyUnroll) * blockDim.x) {
      Acc z[kCrossEntropyUnroll][VEC];
#pragma unroll
      for (int u = 0; u < kCrossEntropyUnroll; ++u)
        load_capped<T, VEC>(x, (v0 + int64_t(u) * blockDim.x) * VEC, a.classes, a.softcap, Acc(0), z[u]);
#pragma unroll
      for (int u = 0; u < kCrossEntropyUnroll; ++u) {
        const int64_t e0 = (v0 + int64_t(u) * blockDim.x) * VEC;
        if (e0 >= a.classes) continue;
        T out[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int64_t j = e0 + e;
          Acc d = fill;
          if (!ignored && !bad) {
            d = fast_exp(z[u][e] - lse) * p_factor;
            if (j == t) d -= target_part;
            if (smooth) d -= smooth_part * (a.weight ? (j < a.classes ? a.weight[j] : Acc(0)) : Acc(1));
            if (a.softcap > Acc(0)) d *= Acc(1) - (z[u][e] / a.softcap) * (z[u][e] / a.softcap);
          }
          out[e] = from_acc<T>(d);
        }
        if (e0 + VEC <= a.classes) {
          Bytes16 b;
          memcpy(&b, out, 16);
          store_vector16<sizeof(T)>(dx + e0, b);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            if (e0 + e < a.classes) dx[e0 + e] = out[e];
        }
      }
    }
  }
}

}  // namespace reducekit::kernels
