// SPDX-License-Identifier: Apache-2.0
// The reduction engine: data movement and fixed-order combines for the statistics of
// reduce_stats.cuh over the three canonical problems (plan/reduction_plan.hpp).
//
// Row and all paths: a contiguous run is a sequence of 16-byte vectors. Lane g of G lanes owns
// vectors g, g + G, g + 2G, ... and loads kReduceUnroll of them before folding them as one chunk,
// so every warp load is a coalesced stretch and several loads are in flight per thread:
//
//   vectors: | l0 l1 .. lG-1 | l0 l1 .. lG-1 | l0 .. | l0 .. |   (one unrolled step = U groups)
//   then whole vectors left over one at a time, then the < VEC tail elements by one lane.
//
//   reduce_row_warp_kernel   G = 1..32 lanes per row, 256 / G rows per CTA step.
//   reduce_row_block_kernel  one CTA per (row, chunk of kRowChunk elements); with several chunks
//                            each CTA leaves its partial in the workspace and the last CTA of
//                            the row (integer ticket) merges the row's partials in a fixed order.
//   reduce_all_kernel        CTA b folds steps b, b + grid, ... of 256 * U vectors (the grid
//                            depends on the element count only); the last CTA merges the
//                            per-CTA partials in a fixed order.
//
// Column path [outer, K, inner], reduce K: a warp is 4 lanes across the inner extent (one
// vector of columns each) by R = 8 lanes down K; each lane loads kColumnUnroll rows per step:
//
//   rows of a step:  lanes (ky = 0, cx = 0..3) rows 0..7, (ky = 1) rows 8..15, ... (ky = 7) ..63
//
// K is cut into segments (length from K only); a segment's statistic is the fixed butterfly over
// the 8 ky lanes of their running statistics; segments s = g, g + 8, ... fold in order into group
// g, and an output is the butterfly of its 8 groups (see reduce_column_kernel): inside one CTA, or
// through the workspace with one CTA per group or per segment and the last CTA of a tile folding
// the parts: the same arithmetic every way. Short columns (K under one 64-row step, where most
// ky lanes would sit idle) take R = 1 instead: 32 lanes across, each folding its whole column,
// one segment, one group (the choice is a function of K, like the rest of the arithmetic).
// The wide layout runs the same 8 lanes as 8 threads across x 4 down, thread ky playing lanes
// ky and ky + 4 (a warp reads 128 contiguous bytes of a row, not 64): the same arithmetic, so
// it may be chosen by the inner extent.
//
// Aligned and unaligned inputs differ only in how elements are loaded (one 16-byte access, or
// for a shifted row two aligned ones shifted into place: vector_io.cuh), never in which lane
// folds which element, so both give the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/combine.cuh"
#include "kernels/reduce_args.hpp"
#include "kernels/reduce_stats.cuh"
#include "kernels/vector_io.cuh"

namespace reducekit::kernels {

template <typename T> constexpr int kVecOf = 16 / sizeof(T);

// ---- loads ---------------------------------------------------------------------------------------
template <typename T, int VEC> __device__ __forceinline__ void load_vector(const T* p, T (&out)[VEC]) {
  static_assert(sizeof(T) * VEC == 16, "vectors are 16 bytes");
  const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
  memcpy(out, &r, 16);
}
// The VEC elements from e0 of a run of len elements: one 16-byte access when the whole tensor is
// aligned (kAligned), else as the run's own alignment allows.
template <bool kAligned, typename T, int VEC>
__device__ __forceinline__ void load_run_vector(const T* run, int64_t e0, int64_t len, T (&out)[VEC]) {
  if constexpr (kAligned) {
    load_vector<T, VEC>(run + e0, out);
  } else {
    const Bytes16 b = load_vector16<T, VEC>(run, e0, len);
    memcpy(out, &b, 16);
  }
}

// Shift by the set's pivot (kShift policies only).
template <class P, typename T> __device__ __forceinline__ typename P::Accum value_of(T raw, typename P::Accum pivot) {
  const auto v = to_accum<typename P::Accum>(raw);
  if constexpr (P::kShift) return v - pivot;
  return v;
}

template <class P, typename T> __device__ __forceinline__ typename P::Accum pivot_at(const T* p) {
  using Acc = typename P::Accum;
  if constexpr (!P::kShift) return Acc(0);
  const Acc v = to_accum<Acc>(*p);
  return isfinite(v) ? v : Acc(0);
}

// N values of one set: the policy's chunk fold, or element by element with their indices.
template <class P, int N, class Index>
__device__ __forceinline__ void fold_values(typename P::Stat& s, const typename P::Accum (&v)[N], Index index) {
  if constexpr (P::kChunked) {
    P::fold_chunk(s, v);
  } else if constexpr (P::kIndexedChunk) {
    P::fold_chunk(s, v, index);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) P::fold(s, v[i], index(i));
  }
}

// ---- combines ------------------------------------------------------------------------------------
// Every thread of the CTA calls this once its partial (in thread 0) is final. Thread 0 stores
// it at parts[index] and takes a ticket; the CTA that takes the last of `count` tickets merges
// parts[0 .. count) in a fixed order (thread t folds t, t + blockDim, ..., then the block tree),
// returns true with the result in thread 0, and zeroes the ticket for the next call.
template <class P>
__device__ bool publish_and_combine(typename P::Stat& s, typename P::Stat* parts, int64_t index, int64_t count,
                                    unsigned* ticket, typename P::Stat* slots) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    store_partial(parts + index, s);
    __threadfence();  // the partial is visible device-wide before the ticket says so
    last = atomicAdd(ticket, 1u) == static_cast<unsigned>(count - 1);
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  typename P::Stat t = P::identity();
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) t = P::merge(t, load_partial(parts + j));
  __syncthreads();  // slots may still be read by warp 0 of the block_tree_reduce before
  t = block_tree_reduce<P>(t, slots);
  if (threadIdx.x == 0) {
    *ticket = 0;
    s = t;
  }
  return true;
}

// Every thread's statistic of one CTA's part (`index` of `count`) of output `out_index` is in `s`:
// the CTA combines it, and either writes the output (one part) or publishes the part, the last
// CTA to finish merging all parts and writing the output.
template <class P>
__device__ __forceinline__ void finish_cta_part(typename P::Stat s, typename P::Stat* slots, typename P::Stat* parts,
                                                int64_t index, int64_t count, unsigned* ticket, const ReduceArgs& a,
                                                typename P::Accum pivot, int64_t out_index) {
  s = block_tree_reduce<P>(s, slots);
  const bool done = count == 1 || publish_and_combine<P>(s, parts, index, count, ticket, slots);
  if (done && threadIdx.x == 0) P::finalize(s, pivot, a.reduced, a.outs, out_index);
}

// ---- row and all paths: one lane's share of a contiguous run -------------------------------------
// Folds the vectors of run[0, len) that lane `lane` of `lanes` owns (see the diagram on top);
// element e of the run has index index_base + e.
// kAligned: every run of the tensor starts 16-byte aligned. Kernels take it as a template
// argument: the shifted loads' registers would otherwise lower every aligned launch's occupancy.
template <class P, bool kAligned, typename T>
__device__ __forceinline__ void fold_run(typename P::Stat& s, const T* run, int64_t len, int64_t index_base, int lane,
                                         int lanes, typename P::Accum pivot) {
  using Acc = typename P::Accum;
  constexpr int VEC = kVecOf<T>, U = kReduceUnroll;
  const int64_t vectors = len / VEC;
  int64_t v = lane;
  for (; v + int64_t(U - 1) * lanes < vectors; v += int64_t(U) * lanes) {
    T raw[U][VEC];
#pragma unroll
    for (int u = 0; u < U; ++u) load_run_vector<kAligned>(run, (v + int64_t(u) * lanes) * VEC, len, raw[u]);
    Acc vals[U * VEC];
#pragma unroll
    for (int i = 0; i < U * VEC; ++i) vals[i] = value_of<P>(raw[i / VEC][i % VEC], pivot);
    fold_values<P>(s, vals, [&](int i) { return index_base + (v + int64_t(i / VEC) * lanes) * VEC + i % VEC; });
  }
  for (; v < vectors; v += lanes) {
    T raw[VEC];
    load_run_vector<kAligned>(run, v * VEC, len, raw);
    Acc vals[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) vals[i] = value_of<P>(raw[i], pivot);
    fold_values<P>(s, vals, [&](int i) { return index_base + v * VEC + i; });
  }
  if (lane == vectors % lanes)
    for (int64_t e = vectors * VEC; e < len; ++e) P::fold(s, value_of<P>(run[e], pivot), index_base + e);
}

// `lanes` lanes a row (a power of two up to 32) at run time: one kernel for every width, the
// folds already taking the lane count as an argument (fold_run).
template <class P, typename T, bool kAligned>
__global__ void __launch_bounds__(kReduceThreads) reduce_row_warp_kernel(ReduceArgs a, int lanes) {
  using Acc = typename P::Accum;
  const int lanes_log2 = __ffs(lanes) - 1;
  const int rows_per_step = kReduceThreads >> lanes_log2;
  const T* x = static_cast<const T*>(a.x);
  const int lane = threadIdx.x & (lanes - 1);
  for (int64_t first = int64_t(blockIdx.x) * rows_per_step; first < a.outer; first += int64_t(gridDim.x) * rows_per_step) {
    // Groups past the last row still join the shuffles, with nothing folded.
    const int64_t row = first + (threadIdx.x >> lanes_log2);
    const bool live = row < a.outer;
    typename P::Stat s = P::identity();
    Acc pivot = 0;
    if (live) {
      const T* run = x + row * a.outer_stride;
      pivot = pivot_at<P>(run);
      fold_run<P, kAligned>(s, run, a.reduced, 0, lane, lanes, pivot);
    }
    s = lane_tree_reduce<P>(s, lanes);
    if (live && lane == 0) P::finalize(s, pivot, a.reduced, a.outs, row);
  }
}

template <class P, typename T, bool kAligned>
__global__ void __launch_bounds__(kReduceThreads) reduce_row_block_kernel(ReduceArgs a) {
  using Acc = typename P::Accum;
  using Stat = typename P::Stat;
  __shared__ Stat slots[32];
  const T* x = static_cast<const T*>(a.x);
  auto* parts = static_cast<Stat*>(a.partials);
  for (int64_t item = blockIdx.x; item < a.outer * a.chunks; item += gridDim.x) {
    const int64_t row = item / a.chunks, chunk = item % a.chunks;
    const T* run = x + row * a.outer_stride;
    const Acc pivot = pivot_at<P>(run);
    const int64_t begin = chunk * a.chunk;
    const int64_t len = a.reduced - begin < a.chunk ? a.reduced - begin : a.chunk;
    Stat s = P::identity();
    fold_run<P, kAligned>(s, run + begin, len, begin, threadIdx.x, blockDim.x, pivot);
    finish_cta_part<P>(s, slots, parts + row * a.chunks, chunk, a.chunks, a.tickets + row, a, pivot, row);
    __syncthreads();  // slots and the ticket flag are reused by the next item
  }
}

template <class P, typename T, bool kAligned>
__global__ void __launch_bounds__(kReduceThreads) reduce_all_kernel(ReduceArgs a) {
  using Acc = typename P::Accum;
  using Stat = typename P::Stat;
  __shared__ Stat slots[32];
  const T* x = static_cast<const T*>(a.x);
  const Acc pivot = pivot_at<P>(x);
  Stat s = P::identity();
  // a.chunks == gridDim.x: the step-to-CTA assignment depends on the element count only.
  for (int64_t begin = int64_t(blockIdx.x) * a.chunk; begin < a.reduced; begin += a.chunks * a.chunk) {
    const int64_t len = a.reduced - begin < a.chunk ? a.reduced - begin : a.chunk;
    fold_run<P, kAligned>(s, x + begin, len, begin, threadIdx.x, blockDim.x, pivot);
  }
  finish_cta_part<P>(s, slots, static_cast<Stat*>(a.partials), blockIdx.x, a.chunks, a.tickets, a, pivot, 0);
}

// ---- column path ---------------------------------------------------------------------------------
// kAligned: every row of the tensor starts 16-byte aligned (no shifted lanes compiled in).
template <class P, typename T, int R, bool kAligned> struct ColumnLane {
  using Acc = typename P::Accum;
  using Stat = typename P::Stat;
  static constexpr int VEC = kVecOf<T>, U = kColumnUnroll;

  const T* slab;  // x at (outer index, k = 0, first column of this lane)
  int64_t stride;  // between rows k
  int columns;     // columns of this lane inside the inner extent (0..VEC)
  bool vector;     // the lane's VEC columns load as one 16-byte access
  bool inside;     // shifted rows: both granules around the lane's VEC columns lie in every row
  int64_t col;     // the lane's first column, and the inner extent (a row k of the slab is
  int64_t inner;   // [slab - col + k * stride, + inner): kShifted reads inside it)

  // kVector: the lane's VEC columns load as one 16-byte access (decided once per lane, outside
  // the row loops: a per-row test put a branch and a scalar fallback around every load). kDynamic
  // (16-bit types) keeps the per-row test: a separate scalar path held every 16-bit value in a
  // register of its own (64 for a chunk) and spilled the Welford kernel.
  // kShifted: VEC columns inside a tensor whose rows are not all aligned: each row as its own
  // alignment allows (vector_io.cuh). kShiftedInside: the same for a lane whose columns start a
  // vector or more into the row and end a vector or more before its end, so the granule holding
  // its first column and the next lie inside every row whatever its shift: two loads a row, no
  // branch.
  static constexpr int kDynamic = 2;
  static constexpr int kShifted = 3;
  static constexpr int kShiftedInside = 4;
  // An inside lane's two granules of row p (the one holding its first column and the next);
  // returns the shift that funnel16 takes.
  __device__ __forceinline__ int load_inside_granules(const T* p, Bytes16& lo, Bytes16& hi) const {
    const int shift = misalignment16(p);
    const char* granule = reinterpret_cast<const char*>(p) - shift;
    lo = load_aligned16(granule);
    hi = load_aligned16(granule + 16);
    return shift;
  }
  template <int kVector> __device__ __forceinline__ void load_row(int64_t k, T (&out)[VEC]) const {
    const T* p = slab + k * stride;
    if constexpr (kVector == kShiftedInside) {
      Bytes16 lo, hi;
      const int shift = load_inside_granules(p, lo, hi);
      const Bytes16 b = funnel16<sizeof(T)>(lo, hi, shift);
      memcpy(out, &b, 16);
    } else if constexpr (kVector == kShifted) {
      const Bytes16 b = load_vector16<T, VEC>(p - col, col, inner);
      memcpy(out, &b, 16);
    } else if (kVector == 1 || (kVector == kDynamic && vector)) {
      load_vector<T, VEC>(p, out);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[j] = j < columns ? p[j] : T(0);
    }
  }

  // Rows [k, k + U) of a shifted lane, kShiftedBatch rows' granules in flight together
  // (load_vectors16): float32 with float32 statistics. Four rows or all U spilled (ptxas), and
  // two did for 16-bit types and for float32 summed in float64.
  static constexpr int kShiftedBatch = sizeof(T) == 4 && sizeof(Acc) == 4 ? 2 : 1;
  __device__ __forceinline__ void load_shifted_rows(int64_t k, T (&raw)[U][VEC]) const {
#pragma unroll
    for (int h = 0; h < U; h += kShiftedBatch) {
      const T* rows[kShiftedBatch];
      int64_t e0[kShiftedBatch];
      Bytes16 b[kShiftedBatch];
#pragma unroll
      for (int u = 0; u < kShiftedBatch; ++u) rows[u] = slab + (k + h + u) * stride - col, e0[u] = col;
      load_vectors16<T, VEC>(rows, e0, inner, b);
      memcpy(raw[h], b, sizeof(b));
    }
  }

  // Rows [k, k + U) of an inside lane, kInsideBatch rows' granule pairs issued before the first
  // funnel: all U rows (16 loads in flight a lane) for 16-bit data of 4-byte statistics, half
  // for those of 8-byte statistics (16-bit logsumexp, sums in float64), two rows for float32.
  static constexpr int kInsideBatch = sizeof(T) >= 4 ? U / 4 : sizeof(Stat) * VEC > 32 ? U / 2 : U;
  // Where the inside lanes run: statistics of 16 to 32 bytes a lane (16-bit sums and extrema,
  // float32 logsumexp), up to 64 for 16-bit data, on 8 lanes down K. The Welford and argmax
  // kernels sit at the register cap, float64 logsumexp and short columns (R = 1) spilled, and
  // float32 sums (kernels held to 80 registers) ran slower than on kShifted's loads, which skip
  // the second granule of an aligned row.
  static constexpr bool kInsideLoads =
      R > 1 && sizeof(T) <= 4 && sizeof(Stat) * VEC > 16 && sizeof(Stat) * VEC <= (sizeof(T) == 2 ? 64 : 32);
  __device__ __forceinline__ void load_inside_rows(int64_t k, T (&raw)[U][VEC]) const {
#pragma unroll
    for (int h = 0; h < U; h += kInsideBatch) {
      Bytes16 lo[kInsideBatch], hi[kInsideBatch];
      int shift[kInsideBatch];
#pragma unroll
      for (int u = 0; u < kInsideBatch; ++u) shift[u] = load_inside_granules(slab + (k + h + u) * stride, lo[u], hi[u]);
#pragma unroll
      for (int u = 0; u < kInsideBatch; ++u) {
        const Bytes16 b = funnel16<sizeof(T)>(lo[u], hi[u], shift[u]);
        memcpy(raw[h + u], &b, 16);
      }
    }
  }

  // Folds rows [k, k + U) when they all lie before `end`, else rows [k, end).
  template <int kVector>
  __device__ __forceinline__ void fold_rows(Stat (&s)[VEC], int64_t k, int64_t end, const Acc (&pivot)[VEC]) const {
    if (k + U <= end) {
      T raw[U][VEC];
      if constexpr (kVector == kShiftedInside) {
        load_inside_rows(k, raw);
      } else if constexpr (kVector == kShifted && kShiftedBatch > 1) {
        load_shifted_rows(k, raw);
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u) load_row<kVector>(k + u, raw[u]);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        Acc vals[U];
#pragma unroll
        for (int u = 0; u < U; ++u) vals[u] = value_of<P>(raw[u][j], pivot[j]);
        fold_values<P>(s[j], vals, [&](int u) { return k + u; });
      }
    } else {
      for (int64_t r = k; r < end; ++r) {
        T raw[VEC];
        load_row<kVector>(r, raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) P::fold(s[j], value_of<P>(raw[j], pivot[j]), r);
      }
    }
  }

  // Rows [k, k + U) and [next, next + U), all before the segment's end: the 2U loads are issued
  // before either chunk is folded (twice the bytes in flight a lane), then the chunks fold in
  // order, exactly as fold_rows(k) followed by fold_rows(next).
  template <int kVector>
  __device__ __forceinline__ void fold_two_steps(Stat (&s)[VEC], int64_t k, int64_t next, const Acc (&pivot)[VEC]) const {
    T raw[2][U][VEC];
#pragma unroll
    for (int u = 0; u < U; ++u) load_row<kVector>(k + u, raw[0][u]);
#pragma unroll
    for (int u = 0; u < U; ++u) load_row<kVector>(next + u, raw[1][u]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t first = h == 0 ? k : next;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        Acc vals[U];
#pragma unroll
        for (int u = 0; u < U; ++u) vals[u] = value_of<P>(raw[h][u][j], pivot[j]);
        fold_values<P>(s[j], vals, [&](int u) { return first + u; });
      }
    }
  }

  // This lane's rows of segment [begin, end): rows ky*U .. ky*U+U-1 of every R*U-row step.
  template <bool kTwoSteps, int kVector>
  __device__ __forceinline__ void fold_segment_as(Stat (&s)[VEC], int64_t k, int64_t end, const Acc (&pivot)[VEC]) const {
    constexpr int64_t kStep = int64_t(R) * U;
    if constexpr (kTwoSteps)
      for (; k + kStep + U <= end; k += 2 * kStep) fold_two_steps<kVector>(s, k, k + kStep, pivot);
    for (; k < end; k += kStep) fold_rows<kVector>(s, k, end, pivot);
  }
  template <bool kTwoSteps>
  __device__ __forceinline__ void fold_segment(Stat (&s)[VEC], int64_t k, int64_t end, const Acc (&pivot)[VEC]) const {
    if (columns == 0) return;
    if constexpr (!kAligned) {
      if constexpr (kInsideLoads) {
        if (inside) {
          fold_segment_as<false, kShiftedInside>(s, k, end, pivot);
          return;
        }
      }
      if (columns == VEC) {  // one pass at a time: two steps of shifted loads would spill
        fold_segment_as<false, kShifted>(s, k, end, pivot);
        return;
      }
    }
    if constexpr (sizeof(T) < 4) fold_segment_as<kTwoSteps, kDynamic>(s, k, end, pivot);
    else if (vector) fold_segment_as<kTwoSteps, 1>(s, k, end, pivot);
    else fold_segment_as<kTwoSteps, 0>(s, k, end, pivot);
  }
};

// Two steps of loads in flight a lane where registers allow it: small statistics (sum, amax, prod
// of 32-bit types); the Welford and 16-bit instantiations sit at or near the 128-register cap.
template <class P, typename T>
constexpr bool kColumnTwoSteps = sizeof(typename P::Stat) * kVecOf<T> <= 16 && sizeof(T) == 4;

// The wide layout (H = kColumnWideLanesPerThread) holds two lanes' segment and group statistics a
// thread: float32 data only (16-bit data ran slower on it, float64 was never planned; LOG.md), and
// only where a lane's statistics are small (sum, mean, prod, amax, amin, logsumexp) and carry no
// index (argmax / argmin); the others keep H = 1, which gives the same bits.
template <class P, typename T>
constexpr bool kColumnWideFits = sizeof(T) == 4 && sizeof(typename P::Stat) * kVecOf<T> <= 32 && !P::kIndexedChunk;

// The last CTA of a split column tile: lane ky = g left-folds the partials of parts g, g + G, ...
// (G = 8 groups, in that order) into acc. Parts p hold group p % G's fold of segments p,
// p + parts, ..., so acc ends as the group accumulator the unsplit route holds in lane ky = g.
// Loads are issued kBatch rounds at a time ahead of their merges: the fold waits on one L2 round
// trip per kBatch * G parts, and its serial chain is ceil(parts / G) merges (8 for 64 segments,
// where the old left fold over segments was 64 merges, run alike by all 8 ky lanes).
template <class P, typename T, int G>
__device__ __forceinline__ void fold_group_partials(typename P::Stat (&acc)[kVecOf<T>],
                                                    const typename P::Stat* column_parts, int64_t part_stride,
                                                    int64_t parts, int columns, int ky) {
  using Stat = typename P::Stat;
  constexpr int VEC = kVecOf<T>;
  // 16 to 32 registers of loads in flight per batch (2 rounds of 8 columns spilled the 16-bit
  // Welford kernel; sum float32 takes 4 rounds, Welford float32 2, 16-bit Welford and argmax 1).
  constexpr int kWords = static_cast<int>(VEC * sizeof(Stat) / 4);
  constexpr int kBatch = kWords >= 16 ? (kWords >= 32 ? 1 : 2) : 16 / kWords;
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = P::identity();
  for (int64_t first = ky; first < parts; first += int64_t(G) * kBatch) {
    Stat buf[kBatch][VEC];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t p = first + int64_t(b) * G;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        buf[b][j] = p < parts && j < columns ? load_partial(column_parts + p * part_stride + j) : P::identity();
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (first + int64_t(b) * G < parts) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] = P::merge(acc[j], buf[b][j]);
      }
    }
  }
}

// The fixed tree over the R ky lanes (for 8: 4 apart, then 2, then 1; lower lanes first); lane
// ky = 0 gets it. Lanes across: 32 / R.
template <class P, int R> __device__ __forceinline__ typename P::Stat ky_butterfly(typename P::Stat s) {
#pragma unroll
  for (int step = R / 2; step > 0; step /= 2) s = P::merge(s, shfl_down_stat(s, step * (32 / R), 32));
  return s;
}

// The butterfly over R lanes down K of a statistic held by threads that each play two lanes, ky
// (`lo`) and ky + R / 2 (`hi`): its first step (lanes R / 2 apart) is the merge of a thread's two,
// lower first, the rest the butterfly over the R / 2 threads down K. Lane ky = 0 gets it.
template <class P, int R>
__device__ __forceinline__ typename P::Stat paired_butterfly(const typename P::Stat& lo, const typename P::Stat& hi) {
  return ky_butterfly<P, R / 2>(P::merge(lo, hi));
}

// The arithmetic of one column (K's segments, a function of K only):
//   seg[s]   = ky butterfly of the 8 lanes' folds of segment s (lane ky folds rows ky*8 .. ky*8+7
//              of every 64-row step, kColumnUnroll rows per chunk)
//   group[g] = left fold of seg[g], seg[g + 8], seg[g + 16], ... (g = 0..7; empty groups are identity)
//   result   = ky butterfly of group[0..7]
// (Short columns, R = 1: the one lane's fold of the one segment is the result.)
// Work is spread three ways (ReduceArgs::parts, from the number of columns only): one CTA per
// tile (parts = 1: lane ky = g keeps group g while the CTA walks every segment), one CTA per
// (tile, group) (parts = min(8, segments)) or one per (tile, segment) (parts = segments); with
// parts > 1 CTA p publishes its group accumulator (lane ky = p % 8) and the last CTA of the
// tile folds the parts (fold_group_partials): the same merges in the same order every way.
// At least 2 CTAs per SM: the 16-bit Welford instantiation would otherwise take 165 registers
// and run one CTA (8 warps) per SM, too few loads in flight. Two-step folds of 32-bit data
// keep 3 (80 registers, no spills): at 2 they took 118, and sum/amax float32 ran slower at
// 4096x32768 and 32768x4096 (LOG.md). The wide layout (H = 2) keeps 2 (its two slots' loads).
// R: lanes down K of the arithmetic, kColumnRowLanes or 1 (short columns); G = R groups.
// H: lanes down K a thread plays (1, or kColumnWideLanesPerThread for R = 8): thread ky plays
// lanes ky and ky + D (D = R / H threads down K, 32 / D across), so a warp reads 32 / D vectors
// of each row side by side. Everything lane v does is done by thread v % D (its statistics in
// acc for v < D, in acc_hi for the others), and the butterfly's first step (lanes D apart)
// merges a thread's two in the same order, so H changes no bits: the planner may pick it by the
// inner extent.
template <class P, typename T, int R, int H, bool kAligned>
__global__ void __launch_bounds__(kReduceThreads, (kColumnTwoSteps<P, T> && H == 1 ? 3 : 2))
    reduce_column_kernel(ReduceArgs a) {
  using Acc = typename P::Accum;
  using Stat = typename P::Stat;
  constexpr int VEC = kVecOf<T>, U = kColumnUnroll, G = R, D = R / H, kLanes = 32 / D;
  constexpr int kLanesPerCta = kReduceThreads / D;  // lanes across columns per CTA
  static_assert(R == kColumnRowLanes || R == 1, "planned layouts: kColumnRowLanes or 1 lanes down K");
  static_assert(H == 1 || (H == kColumnWideLanesPerThread && R == kColumnRowLanes),
                "the wide layout plays two of kColumnRowLanes lanes a thread");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int cx = lane % kLanes, ky = lane / kLanes;
  const int64_t segments = a.chunks, parts = a.parts;
  auto* partials = static_cast<Stat*>(a.partials);

  // Item -> (slice, part), slice -> (outer index, tile): 32-bit divisions whenever the item count
  // fits (the 64-bit ones are a call of ~60 instructions each, paid per item: 2048 short items
  // at 256 x 262144).
  const int64_t items = a.outer * a.tiles * parts;
  const bool narrow = items <= int64_t(INT32_MAX);
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    int64_t slice, part, o, tile;  // slice: (outer index, tile)
    if (narrow) {
      const uint32_t it = static_cast<uint32_t>(item), np = static_cast<uint32_t>(parts);
      const uint32_t nt = static_cast<uint32_t>(a.tiles);
      const uint32_t sl = it / np, oo = sl / nt;
      slice = sl, part = it - sl * np, o = oo, tile = sl - oo * nt;
    } else {
      slice = item / parts, part = item % parts, o = slice / a.tiles, tile = slice % a.tiles;
    }
    const int64_t col = (tile * kLanesPerCta + warp * kLanes + cx) * VEC;
    const int64_t left = a.inner - col;
    ColumnLane<P, T, R, kAligned> cl;
    cl.slab = static_cast<const T*>(a.x) + o * a.outer_stride + col;
    cl.stride = a.reduced_stride;
    cl.columns = left <= 0 ? 0 : (left < VEC ? static_cast<int>(left) : VEC);
    cl.vector = kAligned && cl.columns == VEC;
    cl.inside = !kAligned && col >= VEC && col + 2 * VEC <= a.inner;
    cl.col = col;
    cl.inner = a.inner;
    Acc pivot[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) pivot[j] = j < cl.columns ? pivot_at<P>(cl.slab + j) : Acc(0);

    // Thread ky: group ky's fold of the segments this CTA walked, and with H = 2 group ky + D's
    // in acc_hi (arrays by name, not one indexed by slot: with H = 1 the kernel's SASS is then
    // the same as without the wide layout).
    constexpr int kHi = H == 2 ? VEC : 1;
    Stat acc[VEC], acc_hi[kHi];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = P::identity();
#pragma unroll
    for (int j = 0; j < kHi; ++j) acc_hi[j] = P::identity();
    for (int64_t seg = part; seg < segments; seg += parts) {
      const int64_t begin = seg * a.chunk;
      const int64_t end = a.reduced - begin < a.chunk ? a.reduced : begin + a.chunk;
      Stat s[VEC], s_hi[kHi];
#pragma unroll
      for (int j = 0; j < VEC; ++j) s[j] = P::identity();
#pragma unroll
      for (int j = 0; j < kHi; ++j) s_hi[j] = P::identity();
      cl.template fold_segment<kColumnTwoSteps<P, T>>(s, begin + ky * U, end, pivot);
      if constexpr (H == 1) {
        const bool mine = ky == static_cast<int>(seg % G);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          Stat seg_stat = s[j];
          if constexpr (R > 1) seg_stat = shfl_stat(ky_butterfly<P, R>(s[j]), cx);  // from lane ky = 0
          const Stat merged = P::merge(acc[j], seg_stat);
          if (mine) acc[j] = merged;
        }
      } else {
        cl.template fold_segment<kColumnTwoSteps<P, T>>(s_hi, begin + (ky + D) * U, end, pivot);
        // Group g = seg % G lives in thread g % D, in acc (g < D) or acc_hi; each is updated by a
        // select of its own.
        const int group = static_cast<int>(seg % G);
        const bool mine = ky == group % D;
        const bool lo = mine && group < D, hi = mine && group >= D;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const Stat seg_stat = shfl_stat(paired_butterfly<P, R>(s[j], s_hi[j]), cx);  // from thread ky = 0
          const Stat merged = P::merge(acc[j], seg_stat), merged_hi = P::merge(acc_hi[j], seg_stat);
          acc[j] = lo ? merged : acc[j];
          acc_hi[j] = hi ? merged_hi : acc_hi[j];
        }
      }
    }

    bool finish = parts == 1;
    if (parts > 1) {
      __shared__ bool last_cta;
      const int group = static_cast<int>(part % G);  // published by thread group % D
      if (ky == (H == 1 ? group : group % D))
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          Stat* const out = partials + part * a.outer * a.inner + o * a.inner + col + j;
          if constexpr (H == 2) {
            if (j < cl.columns) store_partial(out, group < D ? acc[j] : acc_hi[j]);
          } else {
            if (j < cl.columns) store_partial(out, acc[j]);  // a copy of acc[j] first reordered the fold (SASS)
          }
        }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) last_cta = atomicAdd(a.tickets + slice, 1u) == static_cast<unsigned>(parts - 1);
      __syncthreads();
      finish = last_cta;
      if (finish) {
        __threadfence();
        const Stat* column_parts = partials + o * a.inner + col;
        fold_group_partials<P, T, G>(acc, column_parts, a.outer * a.inner, parts, cl.columns, ky);
        if constexpr (H == 2)
          fold_group_partials<P, T, G>(acc_hi, column_parts, a.outer * a.inner, parts, cl.columns, ky + D);
        if (threadIdx.x == 0) a.tickets[slice] = 0;
      }
      __syncthreads();  // last_cta is rewritten by the next item
    }
    if (finish) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        Stat r;
        if constexpr (H == 2) r = paired_butterfly<P, R>(acc[j], acc_hi[j]);
        else r = ky_butterfly<P, R>(acc[j]);
        if (ky == 0 && j < cl.columns) P::finalize(r, pivot[j], a.reduced, a.outs, o * a.inner + col + j);
      }
    }
  }
}

// ---- empty reduced sets: every output is finalize(identity) ---------------------------------------
template <class P> __global__ void __launch_bounds__(kReduceThreads) reduce_fill_kernel(ReduceArgs a, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    P::finalize(P::identity(), typename P::Accum(0), 0, a.outs, i);
}

}  // namespace reducekit::kernels
