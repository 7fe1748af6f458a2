// SPDX-License-Identifier: Apache-2.0
// Softmax-family policies for the row engine (row_engine.cuh).
//
// Forward statistic: (max, sum of exp(x - max)), merged online:
//   (m, s) + (m', s') = (M, s * e^(m - M) + s' * e^(m' - M)),  M = max(m, m').
// softmax computes each exp once: a tile keeps e = exp(x - m_tile) and is written as
// e * exp(m_tile - M) / sum. NaN inputs reach the sum through exp(NaN - m) (the merge keeps a
// NaN sum), so a row holding NaN, or +inf (inf - inf is NaN), gives NaN everywhere, as torch
// does; an all -inf row keeps (m, s) = (-inf, 0) and its outputs become NaN, also as torch.
#pragma once

#include <type_traits>

#include "kernels/numeric.cuh"
#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

template <typename T, bool kLog> struct SoftmaxForwardOp {
  using Acc = acc_t<T>;
  static constexpr int kInputs = 1;
  using Stat = StatVec<Acc, 2>;  // w[0]: running max, w[1]: sum of exp(x - max)
  struct Params {
    Acc max;
    Acc scale;  // softmax: 1 / sum; log_softmax: log(sum)
  };
  // softmax: the tile holds exp(x - its own max), so one factor per tile rescales it;
  // log_softmax: the tile holds x, and the row's parameters are all it needs.
  using Local = typename std::conditional<kLog, Params, Acc>::type;

  __device__ static Acc pad(int) { return negative_infinity<Acc>(); }
  __device__ static Stat identity() { return {{negative_infinity<Acc>(), Acc(0)}}; }

  // The operand with the larger max keeps its sum as is; only the other is rescaled (one exp
  // a merge). Which operand that is follows from their values alone (ties broken by the sum),
  // never from their order, so the merge is commutative and every lane of a butterfly ends
  // with the same bits. A NaN sum compares false both ways; it propagates either way.
  // Selected word by word: a reference picked by a condition would put both operands in local
  // memory (seen in the SASS: the butterfly went through the stack).
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    const bool a_top = a.w[0] > b.w[0] || (a.w[0] == b.w[0] && a.w[1] >= b.w[1]);
    const Acc top_max = a_top ? a.w[0] : b.w[0], top_sum = a_top ? a.w[1] : b.w[1];
    const Acc low_max = a_top ? b.w[0] : a.w[0], low_sum = a_top ? b.w[1] : a.w[1];
    if (top_max == negative_infinity<Acc>()) return {{top_max, a.w[1] + b.w[1]}};  // 0, or NaN carried on
    return {{top_max, top_sum + product_unfused(low_sum, fast_exp(low_max - top_max))}};
  }

  template <int N> __device__ static Stat fold(Acc (&v)[1][N]) {
    const Acc m = fold_chains<N>(Max{}, [&](int j) { return v[0][j]; });
    // fmax skips NaN; the sum catches it. With m = -inf (only -inf and NaN seen) subtract 0
    // instead, so exp gives 0 for -inf and NaN for NaN rather than exp(-inf + inf) = NaN.
    const Acc base = m == negative_infinity<Acc>() ? Acc(0) : m;
    const Acc s = fold_chains<N>(Plus{}, [&](int j) {
      const Acc e = fast_exp(v[0][j] - base);
      if (!kLog) v[0][j] = e;
      return e;
    });
    return {{m, s}};
  }

  __device__ static Params finalize(const Stat& s) {
    return {s.w[0], kLog ? precise_log(s.w[1]) : Acc(1) / s.w[1]};
  }

  // Rows in one tile: the row max first, then the sum of exp(x - max) (row_engine.cuh,
  // kTwoPhase); softmax keeps exp(x - max) in the tile, so its factor is 1 / sum alone.
  static constexpr bool kTwoPhase = true;
  using First = RowMax<Acc>;
  using Second = RowSum<Acc>;
  template <int N> __device__ static typename First::Stat fold_first(Acc (&v)[1][N]) {
    return {{fold_chains<N>(Max{}, [&](int j) { return v[0][j]; })}};
  }
  // As fold: a max of -inf (only -inf and NaN in the row) subtracts 0, so -inf gives 0 and NaN NaN.
  template <int N> __device__ static typename Second::Stat fold_second(Acc (&v)[1][N], const typename First::Stat& m) {
    const Acc base = m.w[0] == negative_infinity<Acc>() ? Acc(0) : m.w[0];
    return {{fold_chains<N>(Plus{}, [&](int j) {
      const Acc e = fast_exp(v[0][j] - base);
      if (!kLog) v[0][j] = e;
      return e;
    })}};
  }
  __device__ static Params finalize_two(const typename First::Stat& m, const typename Second::Stat& sum) {
    return finalize({{m.w[0], sum.w[0]}});
  }
  // The row max out of the merged statistic: staged rows (row_staged.cuh) fold once, then write
  // through fold_second.
  __device__ static typename First::Stat first_of(const Stat& s) { return {{s.w[0]}}; }
  __device__ static Local local_two(const Params& p) {
    if constexpr (kLog) return p;
    else return p.scale;
  }

  // A tile whose max is -inf holds exp(-inf - 0) = 0 for its -inf entries: the factor
  // exp(-inf - max) = 0 keeps them 0. An all -inf row (max -inf) gets exp(NaN) = NaN, as torch.
  __device__ static Local local(const Params& p, const Stat& mine) {
    if constexpr (kLog) {
      return p;
    } else {
      return fast_exp(mine.w[0] - p.max) * p.scale;
    }
  }

  // log_softmax subtracts in two steps: x - max is exact for nearby values, while
  // x - (max + log(sum)) would round at the magnitude of x.
  __device__ static Acc output(const Acc (&v)[1], const Local& l) {
    if constexpr (kLog) {
      return (v[0] - l.max) - l.scale;
    } else {
      return v[0] * l;
    }
  }
};

// The backward ops need one per-row sum over (y, dy); Term(y, dy) says of what.
template <typename T, class Term> struct RowSumOverYdy {
  using Acc = acc_t<T>;
  static constexpr int kInputs = 2;
  using Stat = StatVec<Acc, 1>;
  using Params = Acc;
  using Local = Acc;

  __device__ static Acc pad(int) { return Acc(0); }  // Term(0, 0) = 0 for both terms
  __device__ static Stat identity() { return {{Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0]}}; }
  template <int N> __device__ static Stat fold(Acc (&v)[2][N]) {
    return {{fold_chains<N>(Plus{}, [&](int j) { return Term::of(v[0][j], v[1][j]); })}};
  }
  __device__ static Params finalize(const Stat& s) { return s.w[0]; }
  __device__ static Local local(const Params& p, const Stat&) { return p; }
};

struct YTimesDy {
  template <typename Acc> __device__ static Acc of(Acc y, Acc dy) { return y * dy; }
};
struct DyAlone {
  template <typename Acc> __device__ static Acc of(Acc, Acc dy) { return dy; }
};

// dx = y * (dy - sum(y * dy)), inputs (y, dy), y the softmax output.
template <typename T> struct SoftmaxBackwardOp : RowSumOverYdy<T, YTimesDy> {
  using Acc = acc_t<T>;
  __device__ static Acc output(const Acc (&v)[2], const Acc& dot) { return v[0] * (v[1] - dot); }
};

// dx = dy - exp(y) * sum(dy), inputs (y, dy), y the log_softmax output.
template <typename T> struct LogSoftmaxBackwardOp : RowSumOverYdy<T, DyAlone> {
  using Acc = acc_t<T>;
  __device__ static Acc output(const Acc (&v)[2], const Acc& sum) { return v[1] - fast_exp(v[0]) * sum; }
};

}  // namespace reducekit::kernels
