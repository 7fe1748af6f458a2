// SPDX-License-Identifier: Apache-2.0
// layer_norm / rms_norm forwards on staged rows (row_staged.cuh): the row copied once into shared
// memory by bulk copies, one CTA a row or a cluster's shares, every later pass over shared
// memory. The register rows of these ops hold fewer values a thread than softmax's (weight, bias
// and statistics take registers), so their longer rows were read twice, the second time from L2.
//
// Passes: the row's sum (layer_norm) or sum of squares (rms_norm) folded as the share lands;
// layer_norm then the squared deviations from the mean (the exact two-pass variance of the
// register rows, never E[x^2] - E[x]^2); then the output, granule by granule of y, with the
// granule's weight and bias. Combines run in an order fixed by the row length (vectors as the
// staged fold lays them out, the CTA's butterfly, the cluster in rank order), so a row's bits do
// not depend on its alignment or on the other rows.
#pragma once

#include <type_traits>

#include "kernels/norm_ops.cuh"
#include "kernels/row_staged.cuh"

namespace reducekit::kernels {

// The first staged fold of a norm: the sum of the values (kSquares: of their squares); pads are
// 0 and add nothing.
template <typename T, bool kSquares> struct StagedNormSum {
  using Acc = acc_t<T>;
  using Stat = StatVec<Acc, 1>;
  __device__ static Acc pad(int) { return Acc(0); }
  __device__ static Stat identity() { return {{Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0]}}; }
  template <int N> __device__ static Stat fold(const Acc (&v)[1][N]) {
    return {{fold_chains<N>(Plus{}, [&](int j) { return kSquares ? v[0][j] * v[0][j] : v[0][j]; })}};
  }
};

// The norm forwards staged rows run: the plain (one-input) layer_norm and rms_norm.
template <class Op> struct IsStagedNorm : std::false_type {};
template <typename T> struct IsStagedNorm<LayerNormForwardOp<T, false>> : std::true_type {};
template <typename T> struct IsStagedNorm<RmsNormForwardOp<T, false>> : std::true_type {};

// This thread's sum of squared deviations from `mean` over the share's vectors [lo, hi), each
// element's own accumulator (VEC independent chains); elements past the row's end add nothing.
template <typename T, class Sum, int THREADS> struct StagedDeviationPass {
  const StagedRow<T, Sum>& row;
  int lo, hi;
  acc_t<T> mean;
  acc_t<T> m2 = 0;
  template <bool kShifted> __device__ __forceinline__ void run() {
    constexpr int VEC = StagedRow<T, Sum>::VEC;
    using Acc = acc_t<T>;
    Acc part[VEC] = {};
    const int whole_hi = min(hi, row.cols / VEC);
    int v = lo + threadIdx.x;
#pragma unroll 2
    for (; v < whole_hi; v += THREADS) {
      Acc a[1][VEC];
      row.template whole_vector_at<kShifted>(v, a);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const Acc d = a[0][e] - mean;
        part[e] += d * d;
      }
    }
    for (; v < hi; v += THREADS) {
      Acc a[1][VEC];
      row.template vector_at<kShifted>(v, a);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const Acc d = a[0][e] - mean;
        part[e] += v * VEC + e < row.cols ? d * d : Acc(0);
      }
    }
    m2 = fold_chains<VEC>(Plus{}, [&](int e) { return part[e]; });
  }
};

// y's granule g from its staged values: the columns' weight and bias, then Op::output. Element e
// is column g VEC + e - so_elems (y starts so_elems elements past a granule), so the parameters
// move as vectors only when so_elems is 0 (load_columns tests the base pointer's alignment alone).
template <typename T, class Op> struct StagedNormWriter {
  using Acc = acc_t<T>;
  NormExtra<T> extra;
  typename Op::Local local;
  int so_elems, cols;

  __device__ __forceinline__ Acc param_at(const void* p, int j, Acc fill) const {
    if (p == nullptr || j < 0 || j >= cols) return fill;
    if constexpr (sizeof(T) == 2)
      if (extra.params_f32) return static_cast<const float*>(p)[j];
    return to_acc<Acc>(static_cast<const T*>(p)[j]);
  }
  template <int VEC> __device__ __forceinline__ void operator()(Acc (&vals)[1][VEC], int g, Acc (&r)[VEC]) const {
    typename Op::Column c[VEC];
    const int e0 = g * VEC - so_elems;
    if (so_elems == 0) {  // the granule's columns start a vector: whole vectors where the parameters are aligned
      Op::template columns<VEC, false>(extra, e0, cols, c);
    } else {  // columns straddle the parameters' vectors; y's first granule reaches below column 0
#pragma unroll
      for (int e = 0; e < VEC; ++e) c[e] = {param_at(extra.weight, e0 + e, Acc(1)), param_at(extra.bias, e0 + e, Acc(0))};
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const Acc v[1] = {vals[0][e]};
      r[e] = Op::output(v, local, c[e]);
    }
  }
};

// Launched as rows x C CTAs in clusters of C (a plain launch: C = 1), the dynamic shared memory
// staged_share_smem_bytes(P). Rank 0's thread 0 writes the row's mean / rstd.
template <typename T, class Op, int THREADS>
__global__ void __launch_bounds__(THREADS) norm_staged_kernel(RowArgs<T, 1> args, NormExtra<T> extra) {
  static_assert(IsStagedNorm<Op>::value, "staged rows run the plain layer_norm / rms_norm forwards");
  constexpr bool kLayer = std::is_same_v<Op, LayerNormForwardOp<T, false>>;
  using Acc = acc_t<T>;
  using Sum = StagedNormSum<T, !kLayer>;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(128) unsigned char staged_bytes[];
  __shared__ uint64_t arrived[kStagedMaxChunks];
  __shared__ typename Sum::Stat slots[33];
  __shared__ typename Sum::Stat cluster_slot;

  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / ctas;
  const StagedRow<T, Sum> staged =
      stage_share<T, Sum>(args.in[0] + row * args.in_stride[0], args.cols, rank, ctas, staged_bytes, arrived);
  const typename Sum::Stat sum = staged_row_stat<T, Sum, THREADS>(staged, ctas, slots, &cluster_slot);
  const RowSpan at{row, 0, 0, args.cols, false};
  typename Op::Params params;
  if constexpr (kLayer) {
    const Acc mean = sum.w[0] / Acc(args.cols);
    const int vectors = (args.cols + VEC - 1) / VEC;
    StagedDeviationPass<T, Sum, THREADS> deviations{staged, staged.first, min(staged.first + staged.share, vectors),
                                                    mean};
    with_shift(staged.shift, deviations);
    typename Sum::Stat m2 = block_butterfly_reduce<Sum>({{deviations.m2}}, slots);
    if (ctas > 1) m2 = cluster_reduce<Sum>(m2, &cluster_slot);
    params = Op::params(extra, at, mean, m2.w[0]);
  } else {
    params = Op::finalize(extra, at, sum);
  }
  if (rank == 0 && threadIdx.x == 0) Op::row_done(extra, at, params);
  T* out = args.out + row * args.out_stride;
  const StagedNormWriter<T, Op> write{extra, params, misalignment16(out) / int(sizeof(T)), args.cols};
  write_staged_share<T, Sum, THREADS>(staged, rank, ctas, out, write);
}

}  // namespace reducekit::kernels
