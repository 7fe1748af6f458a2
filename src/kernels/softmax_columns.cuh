// SPDX-License-Identifier: Apache-2.0
// Softmax family over a non-innermost dim, read in place: x as [outer, K, inner], one CTA a
// tile of K x width columns (layout and choices in plan/softmax_column_plan.hpp).
//
// Per column: lane r of R folds rows r, r + R, r + 2R, ... U at a time with the row ops' fold
// and merge (softmax_ops.cuh: the same NaN / inf semantics as rows), the R lanes meet in a
// fixed tree in shared memory, lane 0 finalizes, then every lane writes its rows' outputs.
// Staged forward tiles fold and meet twice instead, as one-tile rows do: the max, then the sum.
// Staged tiles are first copied whole into shared memory (cp.async where 16-byte aligned), so
// both passes read x from there; otherwise both passes read x from memory. A CTA loops over the
// tiles the grid leaves it; with two tile buffers (SoftmaxColumnPlan::buffers, resident CTAs) an
// aligned tile's copy is in flight while the one before it is reduced and written.
// A split tile (SoftmaxColumnPlan::split > 1) is shared by a cluster, each CTA a band of its rows
// of K: each meet ends with the CTAs reading one another's totals (distributed shared memory)
// and merging them in rank order, so every CTA of the cluster finalizes the same parameters.
#pragma once

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <cstdint>
#include <cstring>

#include "kernels/numeric.cuh"
#include "kernels/softmax_ops.cuh"
#include "kernels/vector_io.cuh"
#include "plan/softmax_column_plan.hpp"

namespace reducekit::kernels {

// softmax / log_softmax of a column: the row op's statistic; outputs from x directly (a
// column's x is not kept as exp(x - m) between the passes).
template <typename T, bool kLog> struct SoftmaxColumnForwardOp {
  using Row = SoftmaxForwardOp<T, kLog>;
  using Acc = acc_t<T>;
  using Stat = typename Row::Stat;
  using Params = typename Row::Params;
  static constexpr int kInputs = 1;
  __device__ static Acc pad() { return negative_infinity<Acc>(); }
  __device__ static Stat identity() { return Row::identity(); }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return Row::merge(a, b); }
  template <int N> __device__ static Stat fold(Acc (&v)[1][N]) { return Row::template fold<N>(v); }
  __device__ static Params finalize(const Stat& s) { return Row::finalize(s); }
  // Staged tiles take the row op's two phases: the exact max, then the sum of exp(x - max), so
  // a group of rows needs no rescaling merge and the lanes meet by fmax and adds.
  // (Not float64: its two-phase tiles spill at 128 registers.)
  static constexpr bool kTwoPhase = sizeof(T) <= 4;
  using First = typename Row::First;
  using Second = typename Row::Second;
  template <int N> __device__ static typename First::Stat fold_first(Acc (&v)[1][N]) {
    return Row::template fold_first<N>(v);
  }
  template <int N>
  __device__ static typename Second::Stat fold_second(Acc (&v)[1][N], const typename First::Stat& m) {
    return Row::template fold_second<N>(v, m);
  }
  __device__ static Params finalize_two(const typename First::Stat& m, const typename Second::Stat& s) {
    return Row::finalize_two(m, s);
  }
  // An all -inf column has max -inf: x - max is NaN, as torch gives.
  __device__ static Acc output(const Acc (&v)[1], const Params& p) {
    if constexpr (kLog) return (v[0] - p.max) - p.scale;
    else return fast_exp(v[0] - p.max) * p.scale;
  }
};

// The backward ops (inputs y, dy): a plain sum, then the row op's output formula.
template <typename T, class RowOp> struct SoftmaxColumnBackwardOp {
  using Acc = acc_t<T>;
  using Stat = typename RowOp::Stat;
  using Params = typename RowOp::Params;
  static constexpr int kInputs = 2;
  static constexpr bool kTwoPhase = false;
  __device__ static Acc pad() { return Acc(0); }
  __device__ static Stat identity() { return RowOp::identity(); }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return RowOp::merge(a, b); }
  template <int N> __device__ static Stat fold(Acc (&v)[2][N]) { return RowOp::template fold<N>(v); }
  __device__ static Params finalize(const Stat& s) { return RowOp::finalize(s); }
  __device__ static Acc output(const Acc (&v)[2], const Params& p) { return RowOp::output(v, p); }
};

template <typename T> struct ColumnArgs {
  const T* in[2];
  T* out;
  int64_t reduced;  // K
  int64_t inner;
  int64_t tiles_per_slab;
  int64_t items;    // outer * tiles_per_slab
  int col_vectors;  // W
  int k_lanes;      // R
  int buffers;      // staged tile buffers in shared memory (1 or 2)
  int split;        // CTAs (a cluster) a tile; CTA rank s takes rows [s * band, (s + 1) * band) of K
  int64_t band;     // ceil(K / split)
};

// The V columns of one row starting at p, kept as T (a 16-bit row holds half the registers of
// its widened values until a pass widens it): one 16-byte access (kVector), or the first `cols`
// elements one by one (a misaligned tensor or the inner extent's tail; the rest read as `pad`,
// exact in T: -inf or 0).
template <typename T, int V, bool kVector>
__device__ __forceinline__ void load_columns(const T* p, int cols, T pad, T (&out)[V]) {
  if constexpr (kVector) {
    const Bytes16 b = load_aligned16(p);
    memcpy(out, &b, 16);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = j < cols ? p[j] : pad;
  }
}

template <typename T, int V, bool kVector, typename Acc>
__device__ __forceinline__ void store_columns(T* p, int cols, const Acc (&v)[V]) {
  if constexpr (kVector) {
    T t[V];
#pragma unroll
    for (int j = 0; j < V; ++j) t[j] = from_acc<T>(v[j]);
    Bytes16 b;
    memcpy(&b, t, 16);
    store_aligned16(p, b);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (j < cols) p[j] = from_acc<T>(v[j]);
  }
}

// Copies the tile (every input: K rows of width columns from col0, K * W * 16 bytes <= 128 KiB)
// into shared memory, dense rows of W * V elements; columns past the inner extent are zero.
// kVector: one cp.async a vector, issued only (the caller commits and waits); otherwise
// elements, 8 loads in flight a thread before their stores, each picking its input by a select:
// a.in[i] at a runtime i put a 64-byte copy of the arguments on the stack.
template <typename T, int NIN, bool kVector>
__device__ __forceinline__ void stage_tile(const ColumnArgs<T>& a, int64_t slab, int64_t col0, int K, T* tile) {
  constexpr int V = 16 / sizeof(T);
  const int W = a.col_vectors;
  if constexpr (kVector) {
    // W (a power of two) divides the CTA's threads, so a thread keeps one vector column and steps
    // down whole rows: no integer division a vector (two cost ~50 instructions a 16-byte copy).
    const int wv = threadIdx.x % W, step = kColumnSoftmaxThreads / W;
    const int64_t col = col0 + int64_t(wv) * V;
#pragma unroll
    for (int i = 0; i < NIN; ++i) {
      const T* src = a.in[i] + slab + col + int64_t(threadIdx.x / W) * a.inner;
      T* dst = tile + (int64_t(i) * K * W + threadIdx.x) * V;
      for (int k = threadIdx.x / W; k < K; k += step, src += step * a.inner, dst += kColumnSoftmaxThreads * V) {
        if (col < a.inner) __pipeline_memcpy_async(dst, src, 16);
        else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  } else {
    constexpr int B = 8;
    const int width = W * V, total = NIN * K * width;
    for (int base = 0; base < total; base += B * kColumnSoftmaxThreads) {
      T v[B];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int idx = base + b * kColumnSoftmaxThreads + threadIdx.x;
        const int row = idx / width, c = idx - row * width;
        const int i = row / K, k = row - i * K;
        const int64_t col = col0 + c;
        v[b] = idx < total && col < a.inner ? (i == 0 ? a.in[0] : a.in[NIN - 1])[slab + int64_t(k) * a.inner + col] : from_acc<T>(acc_t<T>(0));
      }
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int idx = base + b * kColumnSoftmaxThreads + threadIdx.x;
        if (idx < total) tile[idx] = v[b];
      }
    }
  }
}

// The R lanes of a column vector meet in a fixed tree: step h merges lane r + h into r. Then
// shared[j * kColumnSoftmaxThreads + w] holds the total of element j of column vector w.
template <int V, typename S, class Merge>
__device__ __forceinline__ void meet_lanes(S (&run)[V], S* shared, int W, int R, Merge merge) {
  const int t = threadIdx.x, r = t / W;
#pragma unroll
  for (int j = 0; j < V; ++j) shared[j * kColumnSoftmaxThreads + t] = run[j];
  __syncthreads();
  for (int h = R / 2; h >= 1; h /= 2) {
    if (r < h) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        run[j] = merge(run[j], shared[j * kColumnSoftmaxThreads + t + h * W]);
        shared[j * kColumnSoftmaxThreads + t] = run[j];
      }
    }
    __syncthreads();
  }
}

// A split tile's totals: for each element j of each column vector w, the CTAs' totals (meet_lanes
// left them at shared[j * kColumnSoftmaxThreads + w]) merged in rank order, the same bits in every
// CTA of the cluster, handed to use(w * V + j, total). A thread an element, not V a thread: held
// in registers beside the tile's, V totals a thread cost every column kernel occupancy. The
// caller syncs the cluster before (the totals are written) and before any CTA writes that area
// again or exits.
template <int V, typename S, class Merge, class Use>
__device__ __forceinline__ void merge_cluster_totals(S* shared, int W, int split, Merge merge, Use use) {
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  for (int e = threadIdx.x; e < W * V; e += kColumnSoftmaxThreads) {
    const int w = e / V, j = e - w * V;
    S* const mine = shared + j * kColumnSoftmaxThreads + w;
    S total = *cluster.map_shared_rank(mine, 0);
    for (int s = 1; s < split; ++s) total = merge(total, *cluster.map_shared_rank(mine, s));
    use(e, total);
  }
}

__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }

// Resident CTAs an SM a kernel is held to: left free, the two-phase tiles take 94 (16-bit) and 67
// (float32) registers and lose a CTA an SM; held, they fit without spills. The other staged
// tiles (the backwards) take 86-101 free and three CTAs' 80 held (float32's element-wise tile
// spills 8 bytes).
template <class Op, typename T, bool kStaged> constexpr int column_min_ctas() {
  if constexpr (kStaged && Op::kTwoPhase) return sizeof(T) == 2 ? 3 : 4;
  else if constexpr (kStaged && sizeof(T) <= 4) return 3;
  else return 2;
}

// kStaged: the tile is read once into shared memory. kVector: every row start of every tensor
// is 16-byte aligned and inner a multiple of V (launcher's check); the arithmetic is the same
// either way, only how bytes move differs.
template <class Op, typename T, bool kStaged, bool kVector>
__global__ void __launch_bounds__(kColumnSoftmaxThreads, column_min_ctas<Op, T, kStaged>()) softmax_column_kernel(const ColumnArgs<T> a) {
  constexpr int NIN = Op::kInputs, V = 16 / sizeof(T);
  // Rows a lane loads before folding them: 32 values in flight a lane (16-bit backward at 4 rows spilled).
  constexpr int U = 32 / (NIN * V) < 4 ? 32 / (NIN * V) : 4;
  using Acc = typename Op::Acc;
  using Stat = typename Op::Stat;
  using Params = typename Op::Params;
  extern __shared__ __align__(16) unsigned char smem[];
  const int W = a.col_vectors, R = a.k_lanes, split = kStaged ? a.split : 1;  // the plan splits staged tiles only
  const int t = threadIdx.x, w = t % W, r = t / W;
  // This CTA's band of K (all of it unless split) and its tiles: a cluster's CTAs share each one.
  const unsigned rank = blockIdx.x % split, first_item = blockIdx.x / split, item_step = gridDim.x / split;
  const int64_t K = !kStaged ? a.reduced : rank + 1 < unsigned(split) ? a.band : a.reduced - rank * a.band;
  const std::size_t tile_bytes = kStaged ? std::size_t(NIN) * a.band * W * 16 : 0;
  // [buffers][tile], then the statistics [V][thread] (a warp's stores hit distinct banks), then
  // the parameters [w][V], then (split) the cluster's statistics [w][V].
  Stat* stats = reinterpret_cast<Stat*>(smem + a.buffers * tile_bytes);
  Params* params = reinterpret_cast<Params*>(stats + kColumnSoftmaxThreads * V);
  Stat* cluster_stats = reinterpret_cast<Stat*>(params + W * V);
  const auto item_origin = [&](int64_t item, int64_t* slab, int64_t* col0) {
    const int64_t o = item / a.tiles_per_slab;
    *col0 = (item - o * a.tiles_per_slab) * W * V;
    *slab = (o * a.reduced + rank * a.band) * a.inner;
  };
  // Aligned staged tiles arrive by cp.async, one commit group a tile: the first before the loop,
  // each next one as soon as a buffer is free (two buffers: at the top, while this tile is
  // reduced; one: at the bottom, once it is written).
  constexpr bool kAsync = kStaged && kVector;
  const auto prefetch = [&](int64_t item, int buffer) {
    if (item < a.items) {
      int64_t slab, col0;
      item_origin(item, &slab, &col0);
      stage_tile<T, NIN, true>(a, slab, col0, static_cast<int>(K), reinterpret_cast<T*>(smem + buffer * tile_bytes));
    }
    __pipeline_commit();
  };
  if constexpr (kAsync) prefetch(first_item, 0);

  int buffer = 0;
  for (int64_t item = first_item; item < a.items; item += item_step) {
    int64_t slab, col0;
    item_origin(item, &slab, &col0);
    const int64_t my_col = col0 + int64_t(w) * V;
    const int cols = my_col >= a.inner ? 0 : (a.inner - my_col < V ? static_cast<int>(a.inner - my_col) : V);
    T* const tile = reinterpret_cast<T*>(smem + buffer * tile_bytes);
    if constexpr (kAsync) {
      __pipeline_wait_prior(0);
      __syncthreads();  // every thread's copies are in, and every thread is done with the other buffer
      if (a.buffers == 2) prefetch(item + item_step, buffer ^ 1);
    } else if constexpr (kStaged) {
      stage_tile<T, NIN, false>(a, slab, col0, static_cast<int>(K), tile);
      __syncthreads();
    }
    // Row k of input i as this lane sees it: the staged tile (dense vectors) or x itself.
    const auto row_of = [&](int i, int64_t k) -> const T* {
      if constexpr (kStaged) return tile + ((i * K + k) * W + w) * V;
      else return a.in[i] + slab + k * a.inner + my_col;
    };
    constexpr bool kLoadVector = kStaged || kVector;

    // This lane's rows, U at a time: f(j, v) folds column j's widened values v[NIN][U].
    const T pad = from_acc<T>(Op::pad());
    const auto fold_rows = [&](auto f) {
      if (cols == 0) return;
      for (int64_t k0 = r; k0 < K; k0 += int64_t(R) * U) {
        T raw[U][NIN][V];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + int64_t(u) * R;
#pragma unroll
          for (int i = 0; i < NIN; ++i) {
            if (k < K) load_columns<T, V, kLoadVector>(row_of(i, k), cols, pad, raw[u][i]);
            else {
#pragma unroll
              for (int j = 0; j < V; ++j) raw[u][i][j] = pad;
            }
          }
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
          Acc v[NIN][U];
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < NIN; ++i) v[i][u] = to_acc<Acc>(raw[u][i][j]);
          f(j, v);
        }
      }
    };

    // Pass 1: the statistics of this lane's columns, merged across the R lanes; lane 0 finalizes.
    if constexpr (kStaged && Op::kTwoPhase) {
      // The tile is on chip, so it is read once for the max and once for the sum.
      using First = typename Op::First;
      using Second = typename Op::Second;
      static_assert(2 * sizeof(typename First::Stat) <= sizeof(Stat), "max and sum fit the statistics area");
      auto* const shared_max = reinterpret_cast<typename First::Stat*>(stats);
      auto* const shared_sum = reinterpret_cast<typename Second::Stat*>(shared_max + kColumnSoftmaxThreads * V);
      typename First::Stat m[V];
#pragma unroll
      for (int j = 0; j < V; ++j) m[j] = First::identity();
      fold_rows([&](int j, auto& v) { m[j] = First::merge(m[j], Op::template fold_first<U>(v)); });
      const auto merge_max = [](const auto& a, const auto& b) { return First::merge(a, b); };
      meet_lanes<V>(m, shared_max, W, R, merge_max);
      auto* const cluster_max = reinterpret_cast<typename First::Stat*>(cluster_stats);
      if (split > 1) {
        cluster_sync();
        merge_cluster_totals<V>(shared_max, W, split, merge_max,
                                [&](int e, const auto& total) { cluster_max[e] = total; });
        __syncthreads();
#pragma unroll
        for (int j = 0; j < V; ++j) m[j] = cluster_max[w * V + j];
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) m[j] = shared_max[j * kColumnSoftmaxThreads + w];
      }
      typename Second::Stat sum[V];
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] = Second::identity();
      fold_rows([&](int j, auto& v) { sum[j] = Second::merge(sum[j], Op::template fold_second<U>(v, m[j])); });
      // The sums' own half of the area: no barrier between reading the max and writing them (nor,
      // split, between the peers' reads of this item's sums and the next item's: the max's sync
      // lies between).
      const auto merge_sum = [](const auto& a, const auto& b) { return Second::merge(a, b); };
      meet_lanes<V>(sum, shared_sum, W, R, merge_sum);
      if (split > 1) {
        cluster_sync();
        merge_cluster_totals<V>(shared_sum, W, split, merge_sum, [&](int e, const auto& total) {
          params[e] = Op::finalize_two(cluster_max[e], total);
        });
      } else if (r == 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) params[w * V + j] = Op::finalize_two(m[j], sum[j]);
      }
    } else {
      Stat run[V];
#pragma unroll
      for (int j = 0; j < V; ++j) run[j] = Op::identity();
      fold_rows([&](int j, auto& v) { run[j] = Op::merge(run[j], Op::template fold<U>(v)); });
      const auto merge_stat = [](const Stat& a, const Stat& b) { return Op::merge(a, b); };
      meet_lanes<V>(run, stats, W, R, merge_stat);
      if (split > 1) {
        cluster_sync();
        merge_cluster_totals<V>(stats, W, split, merge_stat,
                                [&](int e, const Stat& total) { params[e] = Op::finalize(total); });
        cluster_sync();  // the peers' reads end before the next item's meet writes the area
      } else if (r == 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) params[w * V + j] = Op::finalize(run[j]);
      }
    }
    __syncthreads();
    Params p[V];
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = params[w * V + j];

    // Pass 2: outputs, U rows of loads in flight before their stores.
    if (cols > 0) {
      T* out = a.out + slab + my_col;
      for (int64_t k0 = r; k0 < K; k0 += int64_t(R) * U) {
        T raw[U][NIN][V];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + int64_t(u) * R;
#pragma unroll
          for (int i = 0; i < NIN; ++i)
            if (k < K) load_columns<T, V, kLoadVector>(row_of(i, k), cols, from_acc<T>(Acc(0)), raw[u][i]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + int64_t(u) * R;
          if (k >= K) break;
          Acc y[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            Acc in[NIN];
#pragma unroll
            for (int i = 0; i < NIN; ++i) in[i] = to_acc<Acc>(raw[u][i][j]);
            y[j] = Op::output(in, p[j]);
          }
          store_columns<T, V, kVector>(out + k * a.inner, cols, y);
        }
      }
    }
    __syncthreads();  // the next item reuses the statistics (and, with one buffer, the tile)
    if constexpr (kAsync) {
      if (a.buffers == 2) buffer ^= 1;
      else prefetch(item + item_step, 0);
    }
  }
  if (split > 1) cluster_sync();  // no CTA leaves while a peer may still read its totals
}

}  // namespace reducekit::kernels
