// SPDX-License-Identifier: Apache-2.0
// layer_norm / rms_norm policies for the row engine (extended interface, see row_engine.cuh),
// and the column kernels that sum dweight / dbias over rows.
//
// layer_norm statistic: (count, mean, M2) per tile by two passes over its registers (mean of the
// real elements, then squared deviations of the real elements only: pads are 0 and would count
// as deviations of -mean), combined across threads and CTAs by Chan's merge. Never E[x^2] - E[x]^2;
// re-read rows streamed through several tiles sum deviations from their first tile's mean
// instead (kShiftedStream).
// rms_norm statistic: the sum of squares (pads 0 add nothing).
// Both take an optional per-column bias: y = xhat * weight + bias (rms_norm's: RmsNormBiasForwardOp).
// Per-column weight/bias are read at output time in the tile's layout (shared by all rows, so
// they come from L1/L2); they have x's type or float32 (params_f32, for 16-bit x).
#pragma once

#include "kernels/numeric.cuh"
#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

// Rounded-to-nearest arithmetic the compiler may not contract into FMAs: Chan's merge must be
// bitwise commutative (every lane of a butterfly has to end with the same bits), and
// fma(a, b, c * d) != fma(c, d, a * b).
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }

// Kernel arguments beyond the engine's RowArgs (x, residual -> y).
template <typename T> struct NormExtra {
  using Acc = acc_t<T>;
  const void* weight = nullptr;  // [cols], or null (ones)
  const void* bias = nullptr;    // [cols], or null (zeros)
  bool params_f32 = false;       // weight/bias are float32 (x 16-bit); else x's type
  Acc eps = 0;
  Acc* mean = nullptr;           // forward: [rows] written when non-null
  Acc* rstd = nullptr;
  const Acc* saved_mean = nullptr;  // backward: the forward's statistics
  const Acc* saved_rstd = nullptr;
  T* sum = nullptr;              // fused residual: s = x + residual, row stride sum_stride
  int64_t sum_stride = 0;
};

// Per-column parameters of VEC elements from e0, in the weight's storage type.
template <typename T, int VEC, bool kAligned>
__device__ __forceinline__ void load_param_columns(const NormExtra<T>& x, const void* p, int e0, int cols,
                                                   acc_t<T> fill, acc_t<T> (&dst)[VEC]) {
  if constexpr (sizeof(T) == 2) {
    if (x.params_f32) {
      load_columns<float, VEC, kAligned>(static_cast<const float*>(p), e0, cols, fill, dst);
      return;
    }
  }
  load_columns<T, VEC, kAligned>(static_cast<const T*>(p), e0, cols, fill, dst);
}

// s = x + residual, rounded to T as an unfused x + residual would be, in place in v[0].
template <typename T, int N> __device__ __forceinline__ void add_residual(acc_t<T> (&v)[2][N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) v[0][j] = to_acc<acc_t<T>>(from_acc<T>(v[0][j] + v[1][j]));
}

// Shared parts of the forward ops: inputs x (and residual), per-column weight (and bias).
template <typename T, bool kResidual> struct NormForwardBase {
  using Acc = acc_t<T>;
  using Extra = NormExtra<T>;
  static constexpr int kInputs = kResidual ? 2 : 1;
  static constexpr int kOutputs = kResidual ? 2 : 1;
  struct Column {
    Acc w, b;
  };
  __device__ static Acc pad(int) { return Acc(0); }
  template <int VEC, bool kAligned>
  __device__ __forceinline__ static void columns(const Extra& x, int e0, int cols, Column (&c)[VEC]) {
    Acc w[VEC], b[VEC];
    load_param_columns<T, VEC, kAligned>(x, x.weight, e0, cols, Acc(1), w);
    load_param_columns<T, VEC, kAligned>(x, x.bias, e0, cols, Acc(0), b);
#pragma unroll
    for (int e = 0; e < VEC; ++e) c[e] = {w[e], b[e]};
  }
  // Per-column parameters of vectors wholly inside the row, the weight / bias cases decided once
  // (row_stream.cuh's output loop over whole tiles): f gets a callable (e0, Column (&)[VEC]) with
  // the values columns() gives there.
  template <typename P> struct WholeColumnPairs {
    const P* w;
    const P* b;
    template <int VEC> __device__ __forceinline__ void operator()(int e0, Column (&c)[VEC]) const {
      constexpr int kPer = 16 / sizeof(P);
#pragma unroll
      for (int q = 0; q < VEC / kPer; ++q) {
        Acc wv[kPer], bv[kPer];
        unpack_to_acc(load_pack<Pack<P, kPer>>(w + e0 + q * kPer), wv);
        unpack_to_acc(load_pack<Pack<P, kPer>>(b + e0 + q * kPer), bv);
#pragma unroll
        for (int e = 0; e < kPer; ++e) c[q * kPer + e] = {wv[e], bv[e]};
      }
    }
  };
  struct WholeColumnsAnyCase {
    const Extra& x;
    template <int VEC> __device__ __forceinline__ void operator()(int e0, Column (&c)[VEC]) const {
      columns<VEC, true>(x, e0, e0 + VEC, c);
    }
  };
  template <class F> __device__ __forceinline__ static void with_whole_columns(const Extra& x, F&& f) {
    if (x.weight != nullptr && x.bias != nullptr && !x.params_f32)
      return f(WholeColumnPairs<T>{static_cast<const T*>(x.weight), static_cast<const T*>(x.bias)});
    f(WholeColumnsAnyCase{x});
  }
  __device__ static Acc second(const Acc (&v)[kInputs]) { return v[0]; }  // s, already rounded to T
  // s is what every statistic and output is computed from (output() reads v[0] only, local()
  // ignores its statistic): streamed rows write it in their first pass and read it back alone in
  // the second (row_stream.cuh, RowArgs::read_back_second).
  static constexpr bool kReadsBackSecond = kResidual;
  __device__ static T* second_row(const Extra& x, int64_t row) { return x.sum + row * x.sum_stride; }
  template <int N> __device__ __forceinline__ static void prepare(Acc (&v)[kInputs][N]) {
    if constexpr (kResidual) add_residual<T, N>(v);
  }
};

template <typename T> struct NormRowParams {
  acc_t<T> mean, rstd;
};

template <typename T, bool kResidual> struct LayerNormForwardOp : NormForwardBase<T, kResidual> {
  using Base = NormForwardBase<T, kResidual>;
  using OneInput = LayerNormForwardOp<T, false>;  // the op on s alone (row_engine.cuh, HoldsInputSum)
  using typename Base::Acc;
  using typename Base::Extra;
  using typename Base::Column;
  using Stat = StatVec<Acc, 3>;  // w[0]: count, w[1]: mean, w[2]: M2 (sum of squared deviations)
  using Params = NormRowParams<T>;
  using Local = Params;

  __device__ static Stat identity() { return {{Acc(0), Acc(0), Acc(0)}}; }

  // Chan's merge in a symmetric form: mean = (na ma + nb mb) / n, M2 += d^2 na nb / n, with
  // d^2 the same for d = mb - ma and ma - mb. An empty side returns the other unchanged.
  __device__ static Stat merge(const Stat& a, const Stat& b) {
    if (a.w[0] == Acc(0)) return b;
    if (b.w[0] == Acc(0)) return a;
    const Acc n = add_rn(a.w[0], b.w[0]);
    const Acc mean = div_rn(add_rn(mul_rn(a.w[0], a.w[1]), mul_rn(b.w[0], b.w[1])), n);
    const Acc d = add_rn(b.w[1], -a.w[1]);
    const Acc shift = mul_rn(mul_rn(d, d), div_rn(mul_rn(a.w[0], b.w[0]), n));
    return {{n, mean, add_rn(add_rn(a.w[2], b.w[2]), shift)}};
  }

  // The real elements are the first `n` of the tile (RowSpan::valid_elems); the rest are pads.
  template <int N> __device__ static Stat fold(const Extra&, const RowSpan& at, Acc (&v)[Base::kInputs][N]) {
    Base::prepare(v);
    constexpr int VEC = 16 / sizeof(T);
    const int n = at.template valid_elems<VEC, N / VEC>();
    if (n == 0) return identity();
    const Acc mean = fold_chains<N>(Plus{}, [&](int j) { return v[0][j]; }) / Acc(n);
    if (n == N) return {{Acc(n), mean, fold_chains<N>(Plus{}, [&](int j) { return (v[0][j] - mean) * (v[0][j] - mean); })}};
    const Acc m2 = fold_chains<N>(Plus{}, [&](int j) {
      const Acc d = v[0][j] - mean;
      return j < n ? d * d : Acc(0);
    });
    return {{Acc(n), mean, m2}};
  }

  // The row's mean and 1 / sqrt(biased variance + eps), from the mean and the sum of squared
  // deviations; the variance clamped at 0 (it cannot go negative here, but stays safe) by a
  // compare, not fmax, so a NaN variance (a row holding inf or NaN) stays NaN and every output of
  // the row is NaN, as torch's (fmax returned 0, leaving -+inf at the row's finite elements).
  __device__ static Params params(const Extra& x, const RowSpan& at, Acc mean, Acc m2) {
    const Acc biased = m2 / Acc(at.cols);
    const Acc var = biased < Acc(0) ? Acc(0) : biased;
    return {mean, Acc(1) / sqrt(var + x.eps)};
  }
  __device__ static Params finalize(const Extra& x, const RowSpan& at, const Stat& s) {
    return params(x, at, s.w[1], s.w[2]);
  }

  // Rows in one tile (row_engine.cuh, kTwoPhase): the exact two-pass statistics, the row's sum
  // and then the squared deviations of its real elements from the mean, with plain-add
  // butterflies instead of Chan's merge (two divisions a step).
  static constexpr bool kTwoPhase = true;
  using First = RowSum<Acc>;
  using Second = RowSum<Acc>;
  template <int N>
  __device__ static typename First::Stat fold_first(const Extra&, const RowSpan&, Acc (&v)[Base::kInputs][N]) {
    Base::prepare(v);
    return {{fold_chains<N>(Plus{}, [&](int j) { return v[0][j]; })}};
  }
  template <int N>
  __device__ static typename Second::Stat fold_second(const Extra&, const RowSpan& at, Acc (&v)[Base::kInputs][N],
                                                      const typename First::Stat& sum) {
    constexpr int VEC = 16 / sizeof(T);
    const int n = at.template valid_elems<VEC, N / VEC>();
    const Acc mean = sum.w[0] / Acc(at.cols);
    if (n == N) return {{fold_chains<N>(Plus{}, [&](int j) { return (v[0][j] - mean) * (v[0][j] - mean); })}};
    return {{fold_chains<N>(Plus{}, [&](int j) {
      const Acc d = v[0][j] - mean;
      return j < n ? d * d : Acc(0);
    })}};
  }
  __device__ static Params finalize_two(const Extra& x, const RowSpan& at, const typename First::Stat& sum,
                                        const typename Second::Stat& m2) {
    return params(x, at, sum.w[0] / Acc(at.cols), m2.w[0]);
  }
  __device__ static Local local_two(const Params& p) { return p; }

  // Rows streamed through several tiles (row_stream.cuh, kShiftedStream): the sums of the
  // deviations from a shift and of their squares, the shift being the mean of the row's first
  // tile (at least 2048 values), so that M2 = q - s^2 / n cancels little: |mean - shift| is at
  // most sqrt((1 - f) / f) standard deviations for a first tile holding a fraction f of the
  // row. Two adds and a multiply-add a value, where Chan's merge a tile took three divisions.
  static constexpr bool kShiftedStream = true;
  using Shifted = RowSumPair<Acc>;
  template <int N> __device__ static void prepare_values(Acc (&v)[Base::kInputs][N]) { Base::prepare(v); }
  template <int N> __device__ static Acc tile_sum(const Acc (&v)[Base::kInputs][N]) {
    return fold_chains<N>(Plus{}, [&](int j) { return v[0][j]; });
  }
  template <int N>
  __device__ static typename Shifted::Stat fold_shifted(const RowSpan& at, const Acc (&v)[Base::kInputs][N], Acc shift) {
    constexpr int VEC = 16 / sizeof(T);
    const int n = at.template valid_elems<VEC, N / VEC>();
    if (n == N)
      return {{fold_chains<N>(Plus{}, [&](int j) { return v[0][j] - shift; }),
               fold_chains<N>(Plus{}, [&](int j) { return (v[0][j] - shift) * (v[0][j] - shift); })}};
    return {{fold_chains<N>(Plus{}, [&](int j) { return j < n ? v[0][j] - shift : Acc(0); }),
             fold_chains<N>(Plus{}, [&](int j) { return j < n ? (v[0][j] - shift) * (v[0][j] - shift) : Acc(0); })}};
  }
  __device__ static Params finalize_shifted(const Extra& x, const RowSpan& at, Acc shift,
                                            const typename Shifted::Stat& s) {
    const Acc offset = s.w[0] / Acc(at.cols);
    return params(x, at, shift + offset, s.w[1] - s.w[0] * offset);
  }
  __device__ static void row_done(const Extra& x, const RowSpan& at, const Params& p) {
    if (x.mean != nullptr) x.mean[at.row] = p.mean;
    if (x.rstd != nullptr) x.rstd[at.row] = p.rstd;
  }
  __device__ static Local local(const Params& p, const Stat&) { return p; }
  __device__ static Acc output(const Acc (&v)[Base::kInputs], const Local& l, const Column& c) {
    return (v[0] - l.mean) * l.rstd * c.w + c.b;
  }
};

template <typename T, bool kResidual> struct RmsNormForwardOp : NormForwardBase<T, kResidual> {
  using Base = NormForwardBase<T, kResidual>;
  using OneInput = RmsNormForwardOp<T, false>;
  using typename Base::Acc;
  using typename Base::Extra;
  using typename Base::Column;
  using Stat = StatVec<Acc, 1>;  // sum of squares
  using Params = Acc;            // rstd
  using Local = Acc;

  __device__ static Stat identity() { return {{Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0]}}; }
  template <int N> __device__ static Stat fold(const Extra&, const RowSpan&, Acc (&v)[Base::kInputs][N]) {
    Base::prepare(v);
    return {{fold_chains<N>(Plus{}, [&](int j) { return v[0][j] * v[0][j]; })}};
  }
  // A row holding +-inf has no finite scale: its rstd is NaN, so the whole row is NaN, as torch's
  // (1 / sqrt(inf) = 0 would leave zeros at the finite elements and NaN at the infinite ones).
  __device__ static Params finalize(const Extra& x, const RowSpan& at, const Stat& s) {
    const Acc mean_square = s.w[0] / Acc(at.cols);
    return isinf(mean_square) ? Acc(NAN) : Acc(1) / sqrt(mean_square + x.eps);
  }
  __device__ static void row_done(const Extra& x, const RowSpan& at, const Params& rstd) {
    if (x.rstd != nullptr) x.rstd[at.row] = rstd;
  }
  __device__ static Local local(const Params& p, const Stat&) { return p; }
  __device__ static Acc output(const Acc (&v)[Base::kInputs], const Local& rstd, const Column& c) {
    return v[0] * rstd * c.w;
  }
};

// rms_norm with a bias (not in torch's): y = x * rstd * weight + bias, rounded once. Kernels of
// its own, picked by the op layer when a bias is given, so rms_norm without one keeps its code:
// the bias's loads and adds in the plain op cost registers everywhere (16-bit staged rows spilled
// at their 64-register budget, ptxas -v) for a parameter torch's rms_norm never has.
template <typename T, bool kResidual> struct RmsNormBiasForwardOp : RmsNormForwardOp<T, kResidual> {
  using Base = RmsNormForwardOp<T, kResidual>;
  using OneInput = RmsNormBiasForwardOp<T, false>;
  using typename Base::Acc;
  using typename Base::Column;
  using typename Base::Local;
  __device__ static Acc output(const Acc (&v)[Base::kInputs], const Local& rstd, const Column& c) {
    return v[0] * rstd * c.w + c.b;
  }
};

// Backward dx, inputs (x, dy), with g = dy * w and xhat = (x - mean) * rstd (rms: x * rstd):
//   layer_norm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   rms_norm:   dx = rstd * (g - xhat * mean(g * xhat))
// fold rewrites the tile to (xhat, g), so the output pass needs neither w nor the statistics
// again. Pads (x = dy = 0) give g = 0 and add nothing to either sum.
template <typename T, bool kLayer> struct NormBackwardOp {
  using Acc = acc_t<T>;
  using Extra = NormExtra<T>;
  static constexpr int kInputs = 2;
  static constexpr int kOutputs = 1;
  struct Column {};
  using Stat = StatVec<Acc, 2>;  // w[0]: sum of g, w[1]: sum of g * xhat
  struct Params {
    Acc rstd, g_mean, gx_mean;
  };
  using Local = Params;

  __device__ static Acc pad(int) { return Acc(0); }
  __device__ static Stat identity() { return {{Acc(0), Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0], a.w[1] + b.w[1]}}; }

  template <int N> __device__ static Stat fold(const Extra& x, const RowSpan& at, Acc (&v)[2][N]) {
    constexpr int VEC = 16 / sizeof(T);
    const Acc mean = kLayer ? x.saved_mean[at.row] : Acc(0);
    const Acc rstd = x.saved_rstd[at.row];
#pragma unroll
    for (int k = 0; k < N / VEC; ++k) {
      Acc w[VEC];
      const int e0 = (at.first + k * at.step) * VEC;
      if (at.aligned) load_param_columns<T, VEC, true>(x, x.weight, e0, at.cols, Acc(1), w);
      else load_param_columns<T, VEC, false>(x, x.weight, e0, at.cols, Acc(1), w);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int j = k * VEC + e;
        v[0][j] = (v[0][j] - mean) * rstd;
        v[1][j] = v[1][j] * w[e];
      }
    }
    const Acc g = fold_chains<N>(Plus{}, [&](int j) { return v[1][j]; });
    const Acc gx = fold_chains<N>(Plus{}, [&](int j) { return v[1][j] * v[0][j]; });
    return {{g, gx}};
  }
  __device__ static Params finalize(const Extra& x, const RowSpan& at, const Stat& s) {
    const Acc n = Acc(at.cols);
    return {x.saved_rstd[at.row], kLayer ? s.w[0] / n : Acc(0), s.w[1] / n};
  }
  __device__ static void row_done(const Extra&, const RowSpan&, const Params&) {}
  template <int VEC, bool kAligned>
  __device__ __forceinline__ static void columns(const Extra&, int, int, Column (&)[VEC]) {}
  __device__ static Local local(const Params& p, const Stat&) { return p; }
  __device__ static Acc output(const Acc (&v)[2], const Local& l, const Column&) {
    return l.rstd * (v[1] - l.g_mean - v[0] * l.gx_mean);
  }
};

// ---- dweight / dbias: column sums over rows, two stages, fixed order, no atomics -------------
//
// Stage 1 (norm_param_grad_partial_kernel): CTA (cx, by) covers the column strip of 32 vectors
// from cx * 32 * VEC and the rows [by * rows_per_block, ...). Warp w of the CTA takes rows
// w, w + 8, ... of that block in order, each lane one vector of columns; the 8 warp sums are
// added in warp order through shared memory and written to partial row by.
// Stage 2 (norm_param_grad_sum_kernel): each column sums the partial rows in an order fixed by
// their number.
// The partition depends on (rows, cols, dtype) only, so results are identical run to run.

constexpr int kParamGradWarps = 8;
constexpr int kParamGradRowsPerBlock = 256;  // rows per partial row (grows only past 65535 blocks)

template <typename T> struct ParamGradArgs {
  const T* x;
  const T* dy;
  int64_t x_stride, dy_stride;
  const acc_t<T>* mean;  // null for rms_norm
  const acc_t<T>* rstd;
  int64_t rows;
  int cols;
  int64_t rows_per_block;
  acc_t<T>* partial;  // [2][blocks][cols]: dweight partials, then dbias partials
  int64_t blocks;
};

template <typename T, int VEC, bool kAligned>
__device__ __forceinline__ void load_row_vector(const T* row, int e0, int cols, acc_t<T> (&dst)[VEC]) {
  if (e0 + VEC <= cols) {
    const auto p = kAligned ? load_pack<Pack<T, VEC>>(row + e0) : pack_of<Pack<T, VEC>>(load_vector16<T, VEC>(row, e0, cols));
#pragma unroll
    for (int e = 0; e < VEC; ++e) dst[e] = to_acc<acc_t<T>>(p.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) dst[e] = e0 + e < cols ? to_acc<acc_t<T>>(row[e0 + e]) : acc_t<T>(0);
  }
}

template <typename T, int VEC, bool kAligned>
__global__ void __launch_bounds__(kParamGradWarps * 32) norm_param_grad_partial_kernel(ParamGradArgs<T> a) {
  using Acc = acc_t<T>;
  __shared__ Acc sums[2][kParamGradWarps][32 * VEC];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e0 = (blockIdx.x * 32 + lane) * VEC;
  const int64_t begin = int64_t(blockIdx.y) * a.rows_per_block;
  const int64_t end = min(begin + a.rows_per_block, a.rows);
  Acc dw[VEC], db[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) dw[e] = db[e] = Acc(0);
  if (e0 < a.cols) {
#pragma unroll 4
    for (int64_t r = begin + warp; r < end; r += kParamGradWarps) {
      Acc x[VEC], dy[VEC];
      load_row_vector<T, VEC, kAligned>(a.x + r * a.x_stride, e0, a.cols, x);
      load_row_vector<T, VEC, kAligned>(a.dy + r * a.dy_stride, e0, a.cols, dy);
      const Acc mean = a.mean != nullptr ? a.mean[r] : Acc(0);
      const Acc rstd = a.rstd[r];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        dw[e] += dy[e] * ((x[e] - mean) * rstd);
        db[e] += dy[e];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    sums[0][warp][lane * VEC + e] = dw[e];
    sums[1][warp][lane * VEC + e] = db[e];
  }
  __syncthreads();
  // 2 * 32 * VEC column sums, each over the 8 warps in order.
  for (int i = threadIdx.x; i < 2 * 32 * VEC; i += blockDim.x) {
    const int which = i / (32 * VEC), c = i % (32 * VEC);
    const int col = blockIdx.x * 32 * VEC + c;
    if (col >= a.cols) continue;
    Acc s = sums[which][0][c];
#pragma unroll
    for (int w = 1; w < kParamGradWarps; ++w) s += sums[which][w][c];
    a.partial[(int64_t(which) * a.blocks + blockIdx.y) * a.cols + col] = s;
  }
}

// Stage 2, for both backward paths (the fused kernel's G partial rows as well): out[c] = sum over
// g of partial[g][c] for dweight (blockIdx.y 0) and dbias (1; either output may be null). Each
// CTA covers 32 columns; warp w adds rows w, w + 8, ... in order, and the 8 warp sums are added
// in warp order: an order fixed by G, with 8 loads in flight per column.
constexpr int kParamSumWarps = 8;

template <typename Acc, typename P>
__global__ void __launch_bounds__(kParamSumWarps * 32)
norm_param_grad_sum_kernel(const Acc* partial, int64_t groups, int cols, P* dweight, P* dbias) {
  __shared__ Acc sums[kParamSumWarps][32];
  P* out = blockIdx.y == 0 ? dweight : dbias;
  if (out == nullptr) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = blockIdx.x * 32 + lane;
  const Acc* p = partial + int64_t(blockIdx.y) * groups * cols;
  Acc s = Acc(0);
  if (c < cols) {
#pragma unroll 4
    for (int64_t g = warp; g < groups; g += kParamSumWarps) s += p[g * cols + c];
  }
  sums[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || c >= cols) return;
  Acc t = sums[0][lane];
#pragma unroll
  for (int w = 1; w < kParamSumWarps; ++w) t += sums[w][lane];
  out[c] = from_acc<P>(t);
}

template <typename Acc> __global__ void fill_kernel(Acc* out, int64_t n, Acc value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

}  // namespace reducekit::kernels
