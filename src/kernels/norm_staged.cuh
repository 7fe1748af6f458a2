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
// is column g VEC + e - so_elems (y starts so_elems elements past a granule). 16-bit rows fetch
// the parameters as raw granules ahead of the input (one aligned load each, or two and a funnel
// shift where y's granules straddle the parameters'), where the weight and bias are of x's type on
// 16-byte granules: a granule's parameters then arrive before its values (float32 rows lost on
// it). Otherwise the parameters move as vectors only when so_elems is 0 (load_columns tests the
// base pointer's alignment alone).
template <typename T, class Op> struct StagedNormWriter {
  using Acc = acc_t<T>;
  static constexpr int VEC = 16 / sizeof(T);
  // Output granules a thread has in flight: four for the float32 plain rms_norm; one elsewhere
  // (16-bit kernels with a bias or layer_norm's statistic spilled at four).
  static constexpr int kUnroll = sizeof(T) == 4 && std::is_same_v<Op, RmsNormForwardOp<T, false>> ? 4 : 1;
  struct Fetched {
    Bytes16 w, b;
  };
  NormExtra<T> extra;
  typename Op::Local local;
  int so_elems, cols;

  __device__ __forceinline__ Acc param_at(const void* p, int j, Acc fill) const {
    if (p == nullptr || j < 0 || j >= cols) return fill;
    if constexpr (sizeof(T) == 2)
      if (extra.params_f32) return static_cast<const float*>(p)[j];
    return to_acc<Acc>(static_cast<const T*>(p)[j]);
  }
  __device__ __forceinline__ void outputs(const Acc (&vals)[1][VEC], const typename Op::Column (&c)[VEC],
                                          Acc (&r)[VEC]) const {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const Acc v[1] = {vals[0][e]};
      r[e] = Op::output(v, local, c[e]);
    }
  }
  __device__ __forceinline__ void operator()(const Acc (&vals)[1][VEC], int g, Acc (&r)[VEC]) const {
    typename Op::Column c[VEC];
    const int e0 = g * VEC - so_elems;
    if (so_elems == 0) {  // columns start a vector: whole vectors where the parameters are aligned
      Op::template columns<VEC, false>(extra, e0, cols, c);
    } else {  // columns straddle the parameters' vectors; y's first granule reaches below column 0
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        c[e] = {param_at(extra.weight, e0 + e, Acc(1)), param_at(extra.bias, e0 + e, Acc(0))};
    }
    outputs(vals, c, r);
  }

  __device__ __forceinline__ bool fetches() const {
    if constexpr (sizeof(T) != 2) {
      return false;
    } else {
      return !extra.params_f32 && extra.weight != nullptr && misalignment16(extra.weight) == 0 &&
             (extra.bias == nullptr || misalignment16(extra.bias) == 0);
    }
  }
  // Whether the parameter granules that columns [e0, e0 + VEC) take lie inside the row.
  __device__ __forceinline__ bool fetch_inside(int e0) const {
    return e0 >= 0 && (e0 / VEC + (so_elems == 0 ? 1 : 2)) * VEC <= cols;
  }
  __device__ __forceinline__ Bytes16 fetch_granule(const void* p, int e0) const {
    const T* q = static_cast<const T*>(p) + e0 / VEC * VEC;
    if (so_elems == 0) return load_aligned16(q);
    return funnel16<sizeof(T)>(load_aligned16(q), load_aligned16(q + VEC), (VEC - so_elems) * int(sizeof(T)));
  }
  __device__ __forceinline__ Fetched fetch(int g) const {
    const int e0 = g * VEC - so_elems;
    Fetched f{};
    if (!fetch_inside(e0)) return f;  // the column path's bounds tests take the row's ends
    f.w = fetch_granule(extra.weight, e0);
    if (extra.bias != nullptr) f.b = fetch_granule(extra.bias, e0);
    return f;
  }
  __device__ __forceinline__ void operator()(const Acc (&vals)[1][VEC], int g, const Fetched& f, Acc (&r)[VEC]) const {
    if (!fetch_inside(g * VEC - so_elems)) return (*this)(vals, g, r);
    Acc w[VEC], b[VEC];
    unpack_to_acc(pack_of<Pack<T, VEC>>(f.w), w);
    unpack_to_acc(pack_of<Pack<T, VEC>>(f.b), b);
    typename Op::Column c[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) c[e] = {w[e], b[e]};
    outputs(vals, c, r);
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
