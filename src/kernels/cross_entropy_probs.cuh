// SPDX-License-Identifier: Apache-2.0
// Cross-entropy against class-probability targets (include/reducekit/loss.hpp): one CTA a row,
// CTAs looping over rows, the logits and the target read as 16-byte vectors side by side (each
// row at its own alignment, vector_io.cuh).
//
// With q_j = (1 - ls) p_j + ls / classes the smoothed target, w the class weights and z the
// (soft-capped) logits, a row's loss is sum_j w_j q_j (lse - z_j) + s lse^2. The forward folds,
// in one pass, softmax's (max, sum of exp) statistic together with
//   mass = sum_j w_j q_j   and   spread = sum_j w_j q_j (z_j - base),
// base being the running max (0 while it is -inf): when the max rises, spread moves by
// mass * (old base - new base). The loss is then mass * log(sum) - spread + s lse^2, with no
// cancellation of lse against z_j where z_j is near the max. The backward writes
//   dlogits_j = g ((mass + 2 s lse) exp(z_j - lse) - w_j q_j)   (times 1 - (z_j / cap)^2 capped)
// and, where asked, dtarget_j = -g (1 - ls) w_j (z_j - lse). The thread-to-element layout and
// the combine order depend on the row length alone: a row's bits do not depend on the batch.
#pragma once

#include <cstdint>

#include "kernels/combine.cuh"
#include "kernels/cross_entropy.cuh"
#include "kernels/numeric.cuh"
#include "kernels/vector_io.cuh"

namespace reducekit::kernels {

constexpr int kProbsThreads = 256;
constexpr int kProbsUnroll = 2;  // vectors of each input a thread loads a step

template <typename T> struct ProbsArgs {
  using Acc = acc_t<T>;
  const T* logits;
  int64_t logits_stride;
  const T* target;
  int64_t target_stride;
  const Acc* weight;  // [classes], or null (every class weighs 1)
  int64_t rows;
  int64_t classes;
  Acc smoothing;  // label smoothing
  Acc z_scale;    // lse_square_scale
  Acc softcap;    // 0: none
  Acc* loss;      // forward: [rows]
  Acc* lse;       // forward: [rows]
  Acc* mass;      // forward: [rows], sum_j w_j q_j
  const Acc* saved_lse;   // backward: [rows]
  const Acc* saved_mass;  // backward: [rows]
  const Acc* grad;        // backward: [rows], or one value for every row
  int64_t grad_stride;    // 1, or 0 where one value serves every row
  T* dlogits;             // backward
  int64_t dlogits_stride;
  T* dtarget;  // backward: null, or the gradient with respect to the target
  int64_t dtarget_stride;
  __device__ __forceinline__ Acc grad_of(int64_t row) const { return grad[row * grad_stride]; }
};

// (max, sum of exp(z - max), spread, mass); spread is relative to base(max). The merge picks the
// operand with the larger max by value (ties by the sum), never by position, and moves only the
// other's sum and spread to its base, so it is commutative and every lane of a butterfly ends
// with the same bits.
template <typename Acc> struct ProbsStatOp {
  using Stat = StatVec<Acc, 4>;
  __device__ static Acc base(Acc max) { return max == negative_infinity<Acc>() ? Acc(0) : max; }
  __device__ static Stat identity() { return {{negative_infinity<Acc>(), Acc(0), Acc(0), Acc(0)}}; }
  // Selected word by word: a reference picked by a condition would put both operands in local memory.
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    const bool a_top = a.w[0] > b.w[0] || (a.w[0] == b.w[0] && a.w[1] >= b.w[1]);
    const Acc top_max = a_top ? a.w[0] : b.w[0], low_max = a_top ? b.w[0] : a.w[0];
    const Acc top_sum = a_top ? a.w[1] : b.w[1], low_sum = a_top ? b.w[1] : a.w[1];
    const Acc top_spread = a_top ? a.w[2] : b.w[2], low_spread = a_top ? b.w[2] : a.w[2];
    const Acc low_mass = a_top ? b.w[3] : a.w[3];
    const Acc sum = top_max == negative_infinity<Acc>() ? a.w[1] + b.w[1]
                                                        : top_sum + product_unfused(low_sum, fast_exp(low_max - top_max));
    const Acc spread = top_spread + (low_spread - product_unfused(low_mass, base(top_max) - base(low_max)));
    return {{top_max, sum, spread, a.w[3] + b.w[3]}};
  }
};

// One row's forward and backward.
template <typename T> struct ProbsRow {
  using Acc = acc_t<T>;
  using Op = ProbsStatOp<Acc>;
  static constexpr int VEC = 16 / sizeof(T), U = kProbsUnroll;
  ProbsArgs<T> a;
  int64_t vectors, step;

  __device__ __forceinline__ explicit ProbsRow(const ProbsArgs<T>& args) : a(args) {
    vectors = (a.classes + VEC - 1) / VEC;
    step = int64_t(U) * blockDim.x;
  }

  // The logits z of the vector from element e0 (outside the row: -inf) and its weighted smoothed
  // targets wq (outside the row: 0), from the vectors' raw bytes. The soft-cap and the class
  // weights are tested once a vector, and a vector inside the row (`whole`) skips the tests an
  // element: tested an element, they cost a branch or a predicated load and a multiply each.
  __device__ __forceinline__ void values(const Bytes16& xb, const Bytes16& pb, int64_t e0, bool whole, Acc (&z)[VEC],
                                         Acc (&wq)[VEC]) const {
    const Acc keep = Acc(1) - a.smoothing, spread = a.smoothing / Acc(a.classes);
    Acc q[VEC];
    values_whole<T, VEC>(pb, Acc(0), q);
    if (a.softcap > Acc(0)) values_whole<T, VEC>(xb, a.softcap, z);
    else values_whole<T, VEC>(xb, Acc(0), z);
#pragma unroll
    for (int e = 0; e < VEC; ++e) wq[e] = keep * q[e] + spread;
    const auto inside = [&](int e) { return whole || uint64_t(e0 + e) < uint64_t(a.classes); };
    if (a.weight) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (inside(e)) wq[e] = a.weight[e0 + e] * wq[e];
    }
    if (!whole) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (!inside(e)) wq[e] = Acc(0), z[e] = negative_infinity<Acc>();
    }
  }

  // body(e0, whole, z, wq) for each of this thread's vectors of the row (e0: its first element;
  // whole: inside the row), a step's U vectors of each input loaded before the first is used.
  // kGranules: the vectors are the granules the rows touch (RowGranules; logits and target rows at
  // the same offsets in their granules), aligned loads at any row length; else the fold's layout,
  // vectors v = tid, tid + threads, ... from the row's start, inside steps from one address an
  // input (VectorBatch::load_inside), or with kShareGranules each granule read once a warp
  // (load_granules, share_granules). The forward keeps the fold's layout: its sums' order.
  // kPrefetch: the next step's vectors load before this step's are used (twice the registers).
  template <bool kGranules, bool kPrefetch, bool kShareGranules, class Body>
  __device__ __forceinline__ void for_vectors(const T* x, const T* p, Body body) const {
    static_assert(kProbsThreads == kCrossEntropyThreads, "load_inside strides by kCrossEntropyThreads");
    using Batch = VectorBatch<T, U>;
    const RowGranules<VEC> rg(x, a.classes);  // kGranules only
    const int64_t whole_vectors = a.classes / VEC, count = kGranules ? rg.count : vectors;
    const auto load = [&](Batch& xs, Batch& ps, int64_t v0) {
      if constexpr (kGranules) {
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (const int64_t k = v0 + int64_t(u) * blockDim.x; k < count) {
            xs.raw[u] = load_row_granule(x, rg, k, a.classes);
            ps.raw[u] = load_row_granule(p, rg, k, a.classes);
          }
      } else if (kShareGranules && Batch::warp_inside_step(v0, whole_vectors)) {
        Bytes16 x_tail[U], p_tail[U];
        xs.load_granules(x, v0, x_tail);
        ps.load_granules(p, v0, p_tail);
        xs.share_granules(x, x_tail);
        ps.share_granules(p, p_tail);
      } else if (!kShareGranules && Batch::inside_step(v0, whole_vectors)) {
        xs.template load_inside<-1>(x, v0);
        ps.template load_inside<-1>(p, v0);
      } else {
        xs.template load<-1>(x, v0, vectors, a.classes);
        ps.template load<-1>(p, v0, vectors, a.classes);
      }
    };
    Batch xs, ps, xn, pn;
    if (kPrefetch) load(xs, ps, threadIdx.x);
    for (int64_t v0 = threadIdx.x; v0 < count; v0 += step) {
      if (!kPrefetch) load(xs, ps, v0);
      else if (v0 + step < count) load(xn, pn, v0 + step);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t v = v0 + int64_t(u) * blockDim.x;
        if (v >= count) break;
        const bool whole = kGranules ? rg.whole(v) : v < whole_vectors;
        const int64_t e0 = kGranules ? rg.first_element(v) : v * VEC;
        Acc z[VEC], wq[VEC];
        values(xs.raw[u], ps.raw[u], e0, whole, z, wq);
        body(e0, whole, z, wq);
      }
      if (kPrefetch) xs = xn, ps = pn;
    }
  }

  // Folds a vector at a time, the vector's max first: one exp an element and one rescale a vector.
  // The same bits with kShareGranules or without: only the loads differ.
  template <bool kShareGranules> __device__ __forceinline__ void forward(int64_t row, typename Op::Stat* slots) const {
    Acc m = negative_infinity<Acc>(), s = Acc(0), spread = Acc(0), mass = Acc(0);
    const auto fold = [&](int64_t e0, bool whole, const Acc(&z)[VEC], const Acc(&wq)[VEC]) {
      const Acc top = fmax(m, fold_chains<VEC>(Max{}, [&](int e) { return z[e]; }));
      const Acc base = Op::base(top);
      // fmax skips NaN; the sum of exp catches it. Elements past the row add nothing.
      s = s * fast_exp(m - base) + fold_chains<VEC>(Plus{}, [&](int e) { return fast_exp(z[e] - base); });
      spread = (spread - mass * (base - Op::base(m))) + fold_chains<VEC>(Plus{}, [&](int e) {
                 return whole || e0 + e < a.classes ? wq[e] * (z[e] - base) : Acc(0);
               });
      mass += fold_chains<VEC>(Plus{}, [&](int e) { return wq[e]; });
      m = top;
    };
    // 16-bit rows: aligned ones prefetch (the fold's instructions a step would otherwise leave the
    // warp with no loads in flight), misaligned ones (kShareGranules) read each granule once a
    // warp; both in one kernel spilled. Float32 rows would lose a CTA an SM to either.
    constexpr bool kHalf = sizeof(T) == 2;
    for_vectors<false, kHalf && !kShareGranules, kHalf && kShareGranules>(a.logits + row * a.logits_stride,
                                                                       a.target + row * a.target_stride, fold);
    const typename Op::Stat stat = block_butterfly_reduce<Op>({{m, s, spread, mass}}, slots);
    if (threadIdx.x == 0) {
      const Acc log_sum = precise_log(stat.w[1]);
      const Acc lse = stat.w[0] + log_sum;  // -inf for an all -inf row
      Acc loss = stat.w[3] * log_sum - stat.w[2];
      if (a.z_scale != Acc(0)) loss += a.z_scale * lse * lse;
      a.loss[row] = loss;
      a.lse[row] = lse;
      a.mass[row] = stat.w[3];
    }
  }

  // Each thread reads and writes only its own vectors. kGranules: every row of the four inputs
  // starts at the logits row's offset in a granule (for_vectors).
  template <bool kGranules> __device__ __forceinline__ void gradient(int64_t row) const {
    const T* x = a.logits + row * a.logits_stride;
    const T* p = a.target + row * a.target_stride;
    T* dx = a.dlogits + row * a.dlogits_stride;
    T* dp = a.dtarget ? a.dtarget + row * a.dtarget_stride : nullptr;
    const Acc lse = a.saved_lse[row], g = a.grad_of(row);
    const Acc p_factor = g * (a.saved_mass[row] + Acc(2) * a.z_scale * lse);
    const Acc target_factor = -g * (Acc(1) - a.smoothing);
    for_vectors<kGranules, false, false>(x, p, [&](int64_t e0, bool whole, const Acc(&z)[VEC], const Acc(&wq)[VEC]) {
      T out[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        Acc d = fast_exp(z[e] - lse) * p_factor - g * wq[e];
        if (a.softcap > Acc(0)) d *= Acc(1) - (z[e] / a.softcap) * (z[e] / a.softcap);
        out[e] = from_acc<T>(d);
      }
      store_row_elements<kGranules>(dx, e0, whole, out, a.classes);
      if (dp) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int64_t j = e0 + e;
          const Acc w = a.weight && uint64_t(j) < uint64_t(a.classes) ? a.weight[j] : Acc(1);
          out[e] = from_acc<T>(target_factor * w * (z[e] - lse));
        }
        store_row_elements<kGranules>(dp, e0, whole, out, a.classes);
      }
    });
  }
};

// CTAs an SM the forward's registers are held to (16-bit three, float64 two; float32 unbounded).
template <typename T> constexpr int kProbsForwardCtasPerSm = sizeof(T) == 2 ? 3 : sizeof(T) == 8 ? 2 : 0;

template <typename T, bool kShareGranules>
__global__ void __launch_bounds__(kProbsThreads, kProbsForwardCtasPerSm<T>)
    cross_entropy_probs_forward_kernel(ProbsArgs<T> a) {
  __shared__ typename ProbsStatOp<acc_t<T>>::Stat slots[33];
  const ProbsRow<T> r(a);
  for_rows(a.rows, 0, 1, [&](int64_t row) { r.template forward<kShareGranules>(row, slots); });
}

template <typename T, bool kGranules>
__global__ void __launch_bounds__(kProbsThreads) cross_entropy_probs_backward_kernel(ProbsArgs<T> a) {
  const ProbsRow<T> r(a);
  for_rows(a.rows, 0, 1, [&](int64_t row) { r.template gradient<kGranules>(row); });
}

}  // namespace reducekit::kernels
