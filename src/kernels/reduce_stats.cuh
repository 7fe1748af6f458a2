// SPDX-License-Identifier: Apache-2.0
// The statistics every reduction is built from, as small policies for reduce_engine.cuh:
//
//   Stat                       what one thread, warp, CTA or chunk knows about its elements
//   identity()                 the statistic of no elements; merge(identity(), s) == s bit for bit
//   fold(s, v, index)          one more element; within a thread, indices only increase
//   fold_chunk(s, v[N])        (kChunked policies) N more elements at once, indices irrelevant
//   fold_chunk(s, v[N], index) (kIndexedChunk policies) N more elements; element i's index is
//                              index(i), called for the chunk's winner only
//   merge(a, b)                two disjoint sets, a's elements before b's where order matters
//   finalize(s, pivot, n, o, i)  writes output i (n: the size of each reduced set)
//
// kShift policies see every value minus the set's pivot (its first element, or 0 when that is
// not finite) and get the pivot back in finalize: moments of 1e4 + randn are then computed on
// numbers near 1, where float32 keeps every digit that matters.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/numeric.cuh"
#include "kernels/reduce_args.hpp"

namespace reducekit::kernels {

// Values arrive in Acc; half types go through float (exact), so float64 accumulation of
// float16 input (sum(dtype=float64)) needs no conversion of its own.
template <typename Acc, typename T> __device__ __forceinline__ Acc to_accum(T v) {
  return static_cast<Acc>(to_acc<acc_t<T>>(v));
}

template <typename Acc> __device__ __forceinline__ void store_as(void* base, DType type, int64_t i, Acc v) {
  switch (type) {
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = static_cast<double>(v); break;
    case DType::kFloat16:
      // From double directly: going through float could round twice.
      if constexpr (sizeof(Acc) == 8) static_cast<__half*>(base)[i] = __double2half(v);
      else static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
    case DType::kBFloat16:
      if constexpr (sizeof(Acc) == 8) static_cast<__nv_bfloat16*>(base)[i] = __double2bfloat16(v);
      else static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      break;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
  }
}

template <typename Acc> __device__ __forceinline__ Acc infinity() { return static_cast<Acc>(INFINITY); }

// t[i] += t[i + W] for i < W, then W / 2, ..., 1: a pairwise sum of t[0, 2W) into t[0]. Written
// as a recursion on W so every loop has a constant trip count: the plain `for (w = N / 2; w > 0;
// w /= 2)` form was left partly rolled by the compiler, which then kept t in local memory
// (STL/LDL in every step of the sum kernels, 64-128 bytes of stack).
template <int W, typename Acc, int N> __device__ __forceinline__ void pairwise_halves(Acc (&t)[N]) {
  if constexpr (W > 0) {
#pragma unroll
    for (int i = 0; i < W; ++i) t[i] += t[i + W];
    pairwise_halves<W / 2>(t);
  }
}

// Merge weights need only relative accuracy, and any fixed instruction is deterministic: float
// takes the one-instruction MUFU reciprocal (about 1 ulp; __frcp_rn added a slow-path call that
// kept every merge a branch, so merges of neighbouring columns could not overlap). float64 keeps
// the exact division, as its tests ask for 1e-12.
__device__ __forceinline__ float reciprocal(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ double reciprocal(double v) { return 1.0 / v; }

// c ? x : y as one PTX selp: never a branch, whatever the compiler makes of the operands.
__device__ __forceinline__ float select_value(bool c, float x, float y) {
  float r;
  asm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %3, 0;\n\tselp.f32 %0, %1, %2, p;\n\t}"
      : "=f"(r) : "f"(x), "f"(y), "r"(static_cast<int>(c)));
  return r;
}
__device__ __forceinline__ double select_value(bool c, double x, double y) {
  double r;
  asm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %3, 0;\n\tselp.f64 %0, %1, %2, p;\n\t}"
      : "=d"(r) : "d"(x), "d"(y), "r"(static_cast<int>(c)));
  return r;
}

// ---- sum and mean ------------------------------------------------------------------------------
template <typename Acc> struct SumPolicy {
  using Accum = Acc;
  struct Stat { Acc s; };
  static constexpr bool kChunked = true;
  static constexpr bool kIndexedChunk = false;
  static constexpr bool kShift = false;

  __device__ static Stat identity() { return {Acc(0)}; }
  __device__ static void fold(Stat& st, Acc v, int64_t) { st.s += v; }
  // Pairwise within the chunk: shorter dependency chains and a smaller rounding error.
  template <int N> __device__ static void fold_chunk(Stat& st, const Acc (&v)[N]) {
    static_assert((N & (N - 1)) == 0, "chunks are a power of two long");
    Acc t[N];
#pragma unroll
    for (int i = 0; i < N; ++i) t[i] = v[i];
    pairwise_halves<N / 2>(t);
    st.s += t[0];
  }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {a.s + b.s}; }
  __device__ static void finalize(const Stat& st, Acc, int64_t n, const ReduceOutputs& o, int64_t i) {
    // mean of an empty set: 0 / 0 = NaN, as torch
    store_as<Acc>(o.out, o.out_type, i, o.mode == ReduceMode::kMean ? st.s / static_cast<Acc>(n) : st.s);
  }
};

// ---- prod --------------------------------------------------------------------------------------
template <typename Acc> struct ProdPolicy {
  using Accum = Acc;
  struct Stat { Acc p; };
  static constexpr bool kChunked = false;
  static constexpr bool kIndexedChunk = false;
  static constexpr bool kShift = false;

  __device__ static Stat identity() { return {Acc(1)}; }
  __device__ static void fold(Stat& st, Acc v, int64_t) { st.p *= v; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {a.p * b.p}; }
  __device__ static void finalize(const Stat& st, Acc, int64_t, const ReduceOutputs& o, int64_t i) {
    store_as<Acc>(o.out, o.out_type, i, st.p);
  }
};

// ---- amax / amin: a NaN, once seen, stays -------------------------------------------------------
template <typename Acc, bool kMax> struct ExtremumPolicy {
  using Accum = Acc;
  struct Stat { Acc m; };
  static constexpr bool kChunked = false;
  static constexpr bool kIndexedChunk = false;
  static constexpr bool kShift = false;

  __device__ static bool beats(Acc v, Acc m) { return isnan(v) || (kMax ? v > m : v < m); }
  __device__ static Stat identity() { return {kMax ? -infinity<Acc>() : infinity<Acc>()}; }
  // With m NaN every comparison is false, so m keeps its NaN.
  __device__ static void fold(Stat& st, Acc v, int64_t) {
    if (beats(v, st.m)) st.m = v;
  }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return beats(b.m, a.m) ? b : a; }
  __device__ static void finalize(const Stat& st, Acc, int64_t, const ReduceOutputs& o, int64_t i) {
    store_as<Acc>(o.out, o.out_type, i, st.m);
  }
};

// ---- argmax / argmin: (value, index); the first NaN wins, then the extreme value, ties to the
// lowest index. merge compares indices, so it needs no order between its operands.
template <typename Acc, bool kMax> struct ArgExtremumPolicy {
  using Accum = Acc;
  struct Stat {
    Acc v;
    int64_t i;  // -1: no element yet
  };
  static constexpr bool kChunked = false;
  static constexpr bool kIndexedChunk = true;
  static constexpr bool kShift = false;

  // v, coming after `held`, replaces it: held is not NaN, and v is NaN or strictly better.
  // !(v <= held) is "v better, or either NaN"; held == held rules out a NaN held.
  __device__ static bool later_wins(Acc v, Acc held) { return held == held && !(kMax ? v <= held : v >= held); }

  __device__ static Stat identity() { return {Acc(0), -1}; }
  __device__ static void fold(Stat& st, Acc v, int64_t index) {
    // indices only increase within a thread: a tie or a later NaN never replaces what is held
    if (st.i < 0 || later_wins(v, st.v)) st = {v, index};
  }
  // The chunk's winner by a tree over adjacent pairs (each merge sees a contiguous earlier run
  // and the run right after it, so `later_wins` keeps first-NaN / first-extreme exactly, the
  // same element a left-to-right fold picks) on 32-bit positions; depth log2(N) instead of a
  // chain of N selects, and one 64-bit index per chunk instead of one per element.
  template <int N, class Index> __device__ static void fold_chunk(Stat& st, const Acc (&v)[N], Index index) {
    Acc bv[N];
    int bi[N];
#pragma unroll
    for (int i = 0; i < N; ++i) bv[i] = v[i], bi[i] = i;
    adjacent_levels<1>(bv, bi);
    if (st.i < 0 || later_wins(bv[0], st.v)) st = {bv[0], index(bi[0])};
  }
  template <int W, int N> __device__ static void adjacent_levels(Acc (&bv)[N], int (&bi)[N]) {
    if constexpr (W < N) {
#pragma unroll
      for (int i = 0; i < N; i += 2 * W) {
        if (later_wins(bv[i + W], bv[i])) bv[i] = bv[i + W], bi[i] = bi[i + W];
      }
      adjacent_levels<2 * W>(bv, bi);
    }
  }
  // Written as one select (no branches), so merges of neighbouring columns overlap. The test is
  // bitwise logic on every condition: the nested `?:` form left a branch in each merge (SASS).
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    const bool an = isnan(a.v), bn = isnan(b.v);
    const bool same = an == bn;                 // both NaN or neither
    const bool tie = an | (a.v == b.v);         // then the lower index wins
    const bool strict = kMax ? b.v > a.v : b.v < a.v;
    const bool b_better = (!same & bn) | (same & ((tie & (b.i < a.i)) | (!tie & strict)));
    return (a.i < 0) | ((b.i >= 0) & b_better) ? b : a;
  }
  __device__ static void finalize(const Stat& st, Acc, int64_t, const ReduceOutputs& o, int64_t i) {
    static_cast<int64_t*>(o.out)[i] = st.i;
  }
};

// ---- logsumexp: online (max, sum of exp(x - max)) ------------------------------------------------
// m never holds NaN (a NaN fails v > m); NaN reaches s through exp(NaN - m) and stays there.
// Equal values add 1 directly, so -inf == -inf and +inf == +inf never form inf - inf.
template <typename Acc> struct LogSumExpPolicy {
  using Accum = Acc;
  struct Stat { Acc m, s; };
  static constexpr bool kChunked = true;
  static constexpr bool kIndexedChunk = false;
  static constexpr bool kShift = false;

  __device__ static Stat identity() { return {-infinity<Acc>(), Acc(0)}; }
  __device__ static void fold(Stat& st, Acc v, int64_t) {
    if (v > st.m) {
      st.s = st.s * fast_exp(st.m - v) + Acc(1);
      st.m = v;
    } else {
      st.s += v == st.m ? Acc(1) : fast_exp(v - st.m);
    }
  }
  // The chunk's maximum first, then one exponential a value and one rescale a chunk, none of them
  // waiting on another (value by value, each fold's compare, branch and exponential waited on the
  // last). A value equal to the maximum adds 1 exactly, so inf - inf never arises; NaN, which
  // fmax passes over, adds NaN through its exponential.
  template <int N> __device__ static void fold_chunk(Stat& st, const Acc (&v)[N]) {
    static_assert((N & (N - 1)) == 0, "chunks are a power of two long");
    Acc m = st.m;
#pragma unroll
    for (int i = 0; i < N; ++i) m = fmax(m, v[i]);
    Acc t[N];
#pragma unroll
    for (int i = 0; i < N; ++i) t[i] = select_value(v[i] == m, Acc(1), fast_exp(v[i] - m));
    pairwise_halves<N / 2>(t);
    // Unfused: a contraction into an FMA in one of the column path's two kernels and not in the
    // other would break its bitwise batch invariance (as MomentsPolicy::merge says).
    st.s = (st.m == m ? st.s : product_unfused(st.s, fast_exp(st.m - m))) + t[0];
    st.m = m;
  }
  __device__ static Acc rescaled(const Stat& x, Acc m) { return x.m == m ? x.s : x.s * fast_exp(x.m - m); }
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    const Acc m = fmax(a.m, b.m);
    return {m, rescaled(a, m) + rescaled(b, m)};
  }
  // torch: log(sum(exp(x - m))) + m with m replaced by 0 when infinite, so all -inf gives -inf
  // and any +inf gives +inf (without NaN).
  __device__ static void finalize(const Stat& st, Acc, int64_t, const ReduceOutputs& o, int64_t i) {
    Acc r = st.m;
    if (isnan(st.s)) r = st.s;
    else if (!isinf(st.m)) r = st.m + precise_log(st.s);
    store_as<Acc>(o.out, o.out_type, i, r);
  }
};

// ---- var, std, var_mean, std_mean: Welford statistics with Chan's merge ------------------------
// (n, mean, biased variance M2 / n) rather than (n, mean, M2): every update is a weighted mean of
// non-negative terms, so nothing overflows unless the variance itself does.
template <typename Acc> struct MomentsPolicy {
  using Accum = Acc;
  struct Stat {
    int64_t n;
    Acc mean;
    Acc var;  // biased: M2 / n
  };
  static constexpr bool kChunked = true;
  static constexpr bool kIndexedChunk = false;
  static constexpr bool kShift = true;

  __device__ static Stat identity() { return {0, Acc(0), Acc(0)}; }
  // A lone inf or NaN has variance NaN, as torch's (x - mean is inf - inf): a set of one value
  // never meets the merge that would make it so.
  __device__ static void fold(Stat& st, Acc v, int64_t) {
    st = merge(st, Stat{1, v, isfinite(v) ? Acc(0) : static_cast<Acc>(NAN)});
  }
  // The chunk sits in registers: its exact two-pass moments, then one Chan merge.
  template <int N> __device__ static void fold_chunk(Stat& st, const Acc (&v)[N]) {
    constexpr Acc kInvN = Acc(1) / Acc(N);
    Acc sum = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) sum += v[i];
    // Rounded once and written unfused: the compiler may otherwise fold sum * kInvN into each
    // v[i] - mean as an FMA, in one kernel and not in another.
    const Acc mean = product_unfused(sum, kInvN);
    Acc var = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const Acc d = v[i] - mean;
      var += product_unfused(product_unfused(d, kInvN), d);
    }
    st = merge(st, Stat{N, mean, var});
  }
  // Branch-free: the column path runs long chains of merges, and merges of the columns a lane
  // holds can only overlap when none of them branches. Written with `?:` the compiler still put
  // two branches (BSSY/BRA/BSYNC) in every merge (the column kernel's SASS); the selects
  // below are PTX selp, so both sides are computed and one is picked. Same values as the
  // conditional form, bit for bit.
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    const Acc na = static_cast<Acc>(a.n), nb = static_cast<Acc>(b.n);
    const Acc inv_n = reciprocal(na + nb);
    const Acc wa = na * inv_n, wb = nb * inv_n;
    const Acc delta = b.mean - a.mean;
    // An infinite mean (inf in the data) would make a.mean + delta * wb = inf - inf (NaN even when
    // both means are the same inf). The weighted sum keeps the true mean: inf with inf or a finite
    // mean, NaN for +inf with -inf or NaN, as reducekit.mean / torch.mean (torch.var_mean's
    // Welford gives NaN there; see README). Such a set's variance is NaN, as torch's (x - mean is
    // inf - inf for the infinite x); the product of the deltas would give inf instead.
    const bool finite = isfinite(delta);
    // Products written unfused: the column path runs this merge in two kernels (one CTA per
    // tile, or one per segment with a last-CTA merge), and the compiler may contract a * x + b
    // into an FMA differently in each, which broke bitwise batch invariance of var_mean.
    const Acc spread = product_unfused(product_unfused(delta, wa), product_unfused(delta, wb));
    const Acc mean_finite = a.mean + product_unfused(delta, wb);
    const Acc mean_weighted = product_unfused(a.mean, wa) + product_unfused(b.mean, wb);
    const Acc var_finite = (product_unfused(a.var, wa) + product_unfused(b.var, wb)) + spread;
    const Acc mean = select_value(finite, mean_finite, mean_weighted);
    const Acc var = select_value(finite, var_finite, static_cast<Acc>(NAN));
    // An empty operand gives the other one bit for bit (identity()); n needs no select (x + 0).
    const bool a_empty = a.n == 0, b_empty = b.n == 0;
    Stat r;
    r.n = a.n + b.n;
    r.mean = select_value(b_empty, a.mean, select_value(a_empty, b.mean, mean));
    r.var = select_value(b_empty, a.var, select_value(a_empty, b.var, var));
    return r;
  }
  __device__ static void finalize(const Stat& st, Acc pivot, int64_t, const ReduceOutputs& o, int64_t i) {
    const Acc nan = static_cast<Acc>(NAN);
    const Acc n = static_cast<Acc>(st.n);
    // torch: M2 / max(0, n - correction), so a non-positive divisor gives inf (or NaN for M2 = 0)
    const Acc divisor = fmax(Acc(0), n - static_cast<Acc>(o.correction));
    const Acc var = st.n == 0 ? nan : st.var * (n / divisor);
    const bool std_dev = o.mode == ReduceMode::kStd || o.mode == ReduceMode::kStdMean;
    store_as<Acc>(o.out, o.out_type, i, std_dev ? sqrt(var) : var);
    if (o.mode == ReduceMode::kVarMean || o.mode == ReduceMode::kStdMean)
      store_as<Acc>(o.mean_out, o.mean_type, i, st.n == 0 ? nan : st.mean + pivot);
  }
};

}  // namespace reducekit::kernels
