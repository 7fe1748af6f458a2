// SPDX-License-Identifier: Apache-2.0
// The plain norm forwards on staged rows (row_staged.cuh): the row copied once into shared memory
// by bulk copies, one CTA a row or a cluster's shares, the output pass over shared memory. The
// norms' register rows hold fewer values a thread than softmax's (weight and statistics take
// registers), and their rows at an odd length move as shifted vectors; staged, both read HBM once.
// layer_norm folds Chan's merged statistic here (count, mean, M2: one pass and one cluster
// exchange); with the variance's exact second pass over shared memory it lost to its register
// rows at every measured shape (bench/results/LOG.md).
//
// Passes: the row's statistic (rms_norm: the sum of squares) folded as the share lands, then the
// output, granule by granule of y, with the granule's parameters. Combines run in an order fixed
// by the row length (vectors as the staged fold lays them out, the CTA's butterfly, the cluster in
// rank order), so a row's bits do not depend on its alignment or on the other rows.
#pragma once

#include <type_traits>

#include "kernels/norm_ops.cuh"
#include "kernels/row_staged.cuh"

namespace reducekit::kernels {

// rms_norm's staged fold: the sum of squares; pads are 0 and add nothing.
template <typename T> struct StagedSumOfSquares {
  using Acc = acc_t<T>;
  using Stat = StatVec<Acc, 1>;
  __device__ static Acc pad(int) { return Acc(0); }
  __device__ static Stat identity() { return {{Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0]}}; }
  template <int N> __device__ static Stat fold(const Acc (&v)[1][N]) {
    return {{fold_chains<N>(Plus{}, [&](int j) { return v[0][j] * v[0][j]; })}};
  }
};

// layer_norm's staged fold: Chan's count, mean and M2 as LayerNormForwardOp merges them, each
// vector (or pair) by its exact two-pass moments; a partial vector folds its real elements only.
template <typename T> struct StagedMeanM2 {
  using Op = LayerNormForwardOp<T, false>;
  using Acc = acc_t<T>;
  using Stat = typename Op::Stat;
  __device__ static Acc pad(int) { return Acc(0); }
  __device__ static Stat identity() { return Op::identity(); }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return Op::merge(a, b); }
  template <int N> __device__ static Stat fold_valid(const Acc (&v)[1][N], int n) {
    if (n <= 0) return identity();
    const Acc mean = fold_chains<N>(Plus{}, [&](int j) { return j < n ? v[0][j] : Acc(0); }) / Acc(n);
    return {{Acc(n), mean, fold_chains<N>(Plus{}, [&](int j) {
               const Acc d = v[0][j] - mean;
               return j < n ? d * d : Acc(0);
             })}};
  }
  template <int N> __device__ static Stat fold(const Acc (&v)[1][N]) { return fold_valid(v, N); }
};

// The norm forwards staged rows run (the plain, one-input ones) and the statistic each folds.
template <class Op> struct StagedNormFold {};
template <typename T> struct StagedNormFold<RmsNormForwardOp<T, false>> { using type = StagedSumOfSquares<T>; };
template <typename T> struct StagedNormFold<RmsNormBiasForwardOp<T, false>> { using type = StagedSumOfSquares<T>; };
template <typename T> struct StagedNormFold<LayerNormForwardOp<T, false>> { using type = StagedMeanM2<T>; };
template <class Op, class = void> struct IsStagedNorm : std::false_type {};
template <class Op> struct IsStagedNorm<Op, std::void_t<typename StagedNormFold<Op>::type>> : std::true_type {};

// y's granule g from its staged values: the columns' weight and bias, then Op::output. Element e
// is column g VEC + e - so_elems (y starts so_elems elements past a granule), so the parameters
// move as vectors only when so_elems is 0 (load_columns tests the base pointer's alignment alone).
template <typename T, class Op> struct StagedNormWriter {
  using Acc = acc_t<T>;
  // Output granules a thread has in flight: four for the plain rms_norm; one with a bias or
  // layer_norm's statistic, whose 16-bit kernels spilled at four (a granule's weight and bias
  // take 16 of their 64 registers).
  static constexpr int kUnroll = std::is_same_v<Op, RmsNormForwardOp<T, false>> ? 4 : 1;
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
    if (so_elems == 0) {  // columns start a vector: whole vectors where the parameters are aligned
      Op::template columns<VEC, false>(extra, e0, cols, c);
    } else {  // columns straddle the parameters' vectors; y's first granule reaches below column 0
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        c[e] = {param_at(extra.weight, e0 + e, Acc(1)), param_at(extra.bias, e0 + e, Acc(0))};
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const Acc v[1] = {vals[0][e]};
      r[e] = Op::output(v, local, c[e]);
    }
  }
};

// Launched as rows x C CTAs in clusters of C (a plain launch: C = 1), the dynamic shared memory
// staged_share_smem_bytes(P). Rank 0's thread 0 writes the row's rstd.
template <typename T, class Op, int THREADS>
__global__ void __launch_bounds__(THREADS) norm_staged_kernel(RowArgs<T, 1> args, NormExtra<T> extra) {
  static_assert(IsStagedNorm<Op>::value, "staged rows run the plain norm forwards");
  using Sum = typename StagedNormFold<Op>::type;
  extern __shared__ __align__(128) unsigned char staged_bytes[];
  __shared__ uint64_t arrived[kStagedMaxChunks];
  __shared__ typename Sum::Stat slots[33];
  __shared__ typename Sum::Stat cluster_slots[kPortableClusterSize];

  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / ctas;
  const StagedRow<T, Sum> staged =
      stage_share<T, Sum>(args.in[0] + row * args.in_stride[0], args.cols, rank, ctas, staged_bytes, arrived);
  const typename Sum::Stat stat = staged_row_stat<T, Sum, THREADS>(staged, ctas, slots, cluster_slots);
  const RowSpan at{row, 0, 0, args.cols, false};
  const typename Op::Params params = Op::finalize(extra, at, stat);
  if (rank == 0 && threadIdx.x == 0) Op::row_done(extra, at, params);
  T* out = args.out + row * args.out_stride;
  const StagedNormWriter<T, Op> write{extra, params, misalignment16(out) / int(sizeof(T)), args.cols};
  write_staged_share<T, Sum, THREADS>(staged, rank, ctas, out, write);
}

}  // namespace reducekit::kernels
