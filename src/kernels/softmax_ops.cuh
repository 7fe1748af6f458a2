// Softmax-family policies for the row engine (row_engine.cuh).
//
// Forward statistic: (max, sum of exp(x - max)), merged online:
//   (m, s) + (m', s') = (M, s * e^(m - M) + s' * e^(m' - M)),  M = max(m, m').
// NaN inputs reach the sum through exp(NaN - m) (and the merge keeps a NaN sum), so a row holding NaN (or +inf, where inf - inf is NaN) gives NaN
// everywhere, as torch does; an all -inf row keeps
// (m, s) = (-inf, 0) and its outputs become exp(-inf - -inf) = NaN, also as torch.
#pragma once

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

  __device__ static Stat identity() { return {{negative_infinity<Acc>(), Acc(0)}}; }

  // Commutative, so every lane of a butterfly sees the same bits.
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    const Acc m = fmax(a.w[0], b.w[0]);
    if (m == negative_infinity<Acc>()) return {{m, a.w[1] + b.w[1]}};  // 0, or NaN carried on
    return {{m, a.w[1] * fast_exp(a.w[0] - m) + b.w[1] * fast_exp(b.w[0] - m)}};
  }

  template <class Tile>
  __device__ static Stat thread_stat(const Tile& tile, int cols, int first, int step) {
    Acc m = negative_infinity<Acc>();
    tile.for_each(cols, first, step, [&](const Acc (&v)[1]) { m = fmax(m, v[0]); });
    // fmax skips NaN; the sum catches it. With m = -inf (only -inf and NaN seen) subtract 0
    // instead, so exp gives 0 for -inf and NaN for NaN rather than exp(-inf + inf) = NaN.
    const Acc base = m == negative_infinity<Acc>() ? Acc(0) : m;
    Acc s = 0;
    tile.for_each(cols, first, step, [&](const Acc (&v)[1]) { s += fast_exp(v[0] - base); });
    return {{m, s}};
  }

  __device__ static Params finalize(const Stat& s) {
    return {s.w[0], kLog ? precise_log(s.w[1]) : Acc(1) / s.w[1]};
  }

  // log_softmax subtracts in two steps: x - max is exact for nearby values, while
  // x - (max + log(sum)) would round at the magnitude of x.
  __device__ static Acc output(const Acc (&v)[1], const Params& p) {
    const Acc shifted = v[0] - p.max;
    return kLog ? shifted - p.scale : fast_exp(shifted) * p.scale;
  }
};

// The backward ops need one per-row sum over (y, dy); Term(y, dy) says of what.
template <typename T, class Term> struct RowSumOverYdy {
  using Acc = acc_t<T>;
  static constexpr int kInputs = 2;
  using Stat = StatVec<Acc, 1>;
  using Params = Acc;

  __device__ static Stat identity() { return {{Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0]}}; }
  template <class Tile>
  __device__ static Stat thread_stat(const Tile& tile, int cols, int first, int step) {
    Acc s = 0;
    tile.for_each(cols, first, step, [&](const Acc (&v)[2]) { s += Term::of(v[0], v[1]); });
    return {{s}};
  }
  __device__ static Params finalize(const Stat& s) { return s.w[0]; }
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
