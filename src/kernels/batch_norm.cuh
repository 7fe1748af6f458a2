// SPDX-License-Identifier: Apache-2.0
// batch_norm's kernels, on the CTA layout of plan/batch_norm_plan.hpp:
//
//   batch_norm_stats_kernel     each CTA folds its chunks of a tile into one partial a channel
//                               (forward: (count, mean, M2), from shifted sums a thread and
//                               Chan's merges across threads; backward: sum(dy) and
//                               sum(dy * (x - mean))).
//   batch_norm_finalize_kernel  a warp a channel merges the channel's partials in a fixed order
//                               and turns them into the channel's outputs (save_mean / save_invstd
//                               and the running statistics, or dweight / dbias) and the apply
//                               pass's parameters.
//   batch_norm_apply_kernel     out = p * (x - mean) + q * dy + r per channel: y (q = 0) or dx.
//
// The finalize and apply kernels of a training pass launch to overlap the kernel ahead
// (programmatic dependent launch): each waits for it before reading what it wrote, so the apply
// CTAs' first loads of x are in flight while the finalize kernel runs.
// Every combine runs in an order fixed by the plan, so the results are deterministic.
// Forward moments are of x - K_c (channel_shift): merged raw, means near 1e4 cost u |mean| / std.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/numeric.cuh"
#include "plan/batch_norm_plan.hpp"

namespace reducekit::kernels {

template <typename Acc> struct BatchNormArgs {
  const void* x = nullptr;
  const void* dy = nullptr;  // backward
  void* out = nullptr;       // y or dx
  int64_t n = 0, c = 0, s = 0, chunk = 0, chunks = 0, tiles = 0, stats_ctas = 0;
  int64_t step_in_run = 0, step_offset = 0, wrap_offset = 0, jump_in_run = 0, jump_offset = 0;  // the plan's
  int tile_vectors = 1;
  bool channels_last = false;   // the plan's layout: where channel_shift finds K_c
  // Columns a channel spans: s where x is read as the columns of [n, c * s] (c, s above are then
  // the matrix's c * s and 1; plan_batch_norm_columns), else 1. Channel ch is columns
  // [ch * segment, (ch + 1) * segment), and the per-channel vectors have c / segment entries.
  int64_t segment = 1;
  const Acc* weight = nullptr;  // null: 1
  const Acc* bias = nullptr;    // null: 0
  Acc momentum = 0, eps = 0;
  Acc* running_mean = nullptr;  // training forward: updated; inference: read
  Acc* running_var = nullptr;
  Acc* save_mean = nullptr;     // forward: written
  Acc* save_invstd = nullptr;
  const Acc* mean = nullptr;    // backward: the forward's save_mean / save_invstd
  const Acc* invstd = nullptr;
  bool batch_statistics = true;  // backward: dx includes the statistics' dependence on x
  Acc* dweight = nullptr;
  Acc* dbias = nullptr;
  Acc* partials = nullptr;       // [c][stats_ctas][2]
  Acc* params = nullptr;         // [4][c]: mean, p, q, r (store_params)
};

// ---- element access ------------------------------------------------------------------------

template <int Bytes> struct BitsOf;
template <> struct BitsOf<16> { using type = uint4; };
template <> struct BitsOf<8> { using type = uint2; };
template <> struct BitsOf<4> { using type = unsigned int; };
template <> struct BitsOf<2> { using type = unsigned short; };

// Written streaming: y and dx are not read again by this op.
template <typename T, int VEC, typename Acc> __device__ __forceinline__ void store_values(T* p, const Acc (&v)[VEC]) {
  using B = typename BitsOf<sizeof(T) * VEC>::type;
  T e[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) e[i] = from_acc<T>(v[i]);
  B bits;
  memcpy(&bits, e, sizeof(bits));
  __stcs(reinterpret_cast<B*>(p), bits);
}

// A vector's raw bits, converted where they are used: a batch of raw vectors in flight costs a
// quarter (16-bit) or half the registers of their float32 values.
template <typename T, int VEC> using RawVector = typename BitsOf<sizeof(T) * VEC>::type;

template <typename T, int VEC, bool kLastUse> __device__ __forceinline__ RawVector<T, VEC> load_raw(const T* p) {
  using B = RawVector<T, VEC>;
  return kLastUse ? __ldcs(reinterpret_cast<const B*>(p)) : *reinterpret_cast<const B*>(p);
}

template <typename T, int VEC, typename Acc> __device__ __forceinline__ Acc element(const RawVector<T, VEC>& v, int i) {
  T e[VEC];
  memcpy(e, &v, sizeof(v));
  return to_acc<Acc>(e[i]);
}

// Channels-first: a position `in_run` elements into its channel's run of s, at `offset`, moved on
// by in_run_step elements and offset_step, onto the next run (wrap_offset on) when it passes s.
template <typename Acc>
__device__ __forceinline__ void advance_in_runs(const BatchNormArgs<Acc>& a, int64_t in_run_step, int64_t offset_step,
                                                int64_t& in_run, int64_t& offset) {
  offset += offset_step;
  in_run += in_run_step;
  if (in_run >= a.s) {
    in_run -= a.s;
    offset += a.wrap_offset;
  }
}

// Where a CTA's vectors lie. Channels-first: the channel's n * s elements in run order, vectors
// t, t + 256, ... of the chunk (a vector never crosses a run: s % VEC == 0 where VEC > 1).
// Channels-last: rows r0 + t / W, r0 + t / W + 256 / W, ... at the tile's column vector t % W.
// `offset` is the current vector's element offset in x; next() steps it on by the plan's step and
// wrap, without a division or a multiplication (the walk's arithmetic was most of the
// statistics pass's instructions).
template <BatchNormLayout L, int VEC> struct ChunkWalk {
  int64_t offset = 0;
  int64_t in_run = 0;        // channels-first: the vector's place in its run (< s)
  int left = 0;              // the thread's vectors in the chunk from this one on
  int64_t channel = 0;       // channels-first: the CTA's; channels-last: the thread's first
  bool column_valid = true;  // channels-last: the thread's column holds channels

  template <typename Acc> __device__ ChunkWalk(const BatchNormArgs<Acc>& a, int64_t tile, int64_t k) {
    const int t = threadIdx.x;
    if constexpr (L == BatchNormLayout::kChannelsFirst) {
      channel = tile;
    } else {
      channel = (tile * a.tile_vectors + t % a.tile_vectors) * VEC;
      column_valid = channel < a.c;
    }
    start_chunk(a, k);
  }
  // The thread's first vector of chunk k; channels-first, the caller has set in_run to its place
  // in the run where offset is not recomputed (start_chunk(a, k, false)).
  template <typename Acc> __device__ __forceinline__ void start_chunk(const BatchNormArgs<Acc>& a, int64_t k,
                                                                      bool place_offset = true) {
    const int t = threadIdx.x;
    const int64_t end = min(a.n * a.s, (k + 1) * a.chunk);
    if constexpr (L == BatchNormLayout::kChannelsFirst) {
      constexpr int64_t kStep = int64_t(kBatchNormThreads) * VEC;
      const int64_t pos = k * a.chunk + int64_t(t) * VEC;
      left = pos < end ? static_cast<int>((end - pos + kStep - 1) / kStep) : 0;
      if (left == 0 || !place_offset) return;  // (s may be 0)
      in_run = pos % a.s;
      offset = pos / a.s * (a.c * a.s) + channel * a.s + in_run;
    } else {
      const int row_step = kBatchNormThreads / a.tile_vectors;  // a power of two
      const int64_t pos = k * a.chunk + t / a.tile_vectors;
      left = column_valid && pos < end ? static_cast<int>((end - pos + row_step - 1) >> (__ffs(row_step) - 1)) : 0;
      if (place_offset) offset = pos * a.c + channel;
    }
  }
  __device__ __forceinline__ bool valid() const { return left > 0; }
  template <typename Acc> __device__ __forceinline__ void next(const BatchNormArgs<Acc>& a) {
    --left;
    if constexpr (L == BatchNormLayout::kChannelsFirst) {
      advance_in_runs(a, a.step_in_run, a.step_offset, in_run, offset);
    } else {
      offset += a.step_offset;
    }
  }
};

// A statistics thread's vectors of its tile, chunk after chunk (chunks r, r + stats_ctas, ...):
// the thread's first vector of each chunk is the plan's jump on from that of the one before.
template <BatchNormLayout L, int VEC> struct ChunkStream {
  ChunkWalk<L, VEC> walk;
  int64_t k;
  int64_t start_offset, start_in_run;  // the thread's first vector of chunk k
  bool more;                           // chunk k + stats_ctas exists (and the column holds channels)
  template <typename Acc>
  __device__ ChunkStream(const BatchNormArgs<Acc>& a, int64_t tile, int64_t r)
      : walk(a, tile, r), k(r), start_offset(walk.offset), start_in_run(walk.in_run),
        more(walk.column_valid && r + a.stats_ctas < a.chunks) {}
  __device__ __forceinline__ bool valid() const { return walk.valid(); }
  template <typename Acc> __device__ __forceinline__ void next(const BatchNormArgs<Acc>& a) {
    walk.next(a);
    // Only the tile's last chunk can lack a vector of this thread (every other one has 256 * VEC
    // elements or rows at least): a thread with none in chunk r has no later chunk either.
    if (!walk.valid() && more) {
      k += a.stats_ctas;
      more = k + a.stats_ctas < a.chunks;
      if constexpr (L == BatchNormLayout::kChannelsFirst) {
        advance_in_runs(a, a.jump_in_run, a.jump_offset, start_in_run, start_offset);
        walk.in_run = start_in_run;
      } else {
        start_offset += a.jump_offset;
      }
      walk.offset = start_offset;
      walk.start_chunk(a, k, false);
    }
  }
};

// U raw vectors of x (and dy) a thread has loaded; the first `count` are real.
template <typename T, int VEC, int U, bool kBackward> struct RawBatch {
  RawVector<T, VEC> x[U], dy[kBackward ? U : 1];
  int count;
};

template <typename T, int VEC, int U, bool kBackward, BatchNormLayout L, typename Acc>
__device__ __forceinline__ void fill(RawBatch<T, VEC, U, kBackward>& b, ChunkStream<L, VEC>& stream,
                                     const BatchNormArgs<Acc>& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  b.count = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    b.x[u] = RawVector<T, VEC>{};
    if constexpr (kBackward) b.dy[u] = RawVector<T, VEC>{};
    if (stream.valid()) {
      b.x[u] = load_raw<T, VEC, false>(x + stream.walk.offset);
      if constexpr (kBackward) b.dy[u] = load_raw<T, VEC, false>(dy + stream.walk.offset);
      ++b.count;
    }
    stream.next(a);
  }
}

// Channels a thread accumulates: one (the CTA's) channels-first, one a vector lane channels-last.
template <BatchNormLayout L, int VEC> constexpr int kLanesOf = L == BatchNormLayout::kChannelsFirst ? 1 : VEC;

// ---- statistics ----------------------------------------------------------------------------

template <typename Acc> struct Moments {
  int64_t n;
  Acc mean, m2;
};

// Chan's merge of two disjoint sets.
template <typename Acc> __device__ __forceinline__ Moments<Acc> merge(const Moments<Acc>& a, const Moments<Acc>& b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const int64_t n = a.n + b.n;
  const Acc wb = static_cast<Acc>(b.n) / static_cast<Acc>(n);
  const Acc delta = b.mean - a.mean;
  return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * static_cast<Acc>(a.n) * wb};
}

template <typename Acc> struct Sums {
  Acc dy, dy_xc;  // sum(dy), sum(dy * (x - mean))
};
template <typename Acc> __device__ __forceinline__ Sums<Acc> merge(const Sums<Acc>& a, const Sums<Acc>& b) {
  return {a.dy + b.dy, a.dy_xc + b.dy_xc};
}

// s[r * cols + j] for r < rows (a power of two) merged into s[j], pairwise in a fixed order.
template <class Slot> __device__ __forceinline__ void merge_rows(Slot* s, int rows, int cols) {
  for (int half = rows / 2; half > 0; half /= 2) {
    __syncthreads();
    for (int i = threadIdx.x; i < half * cols; i += blockDim.x) s[i] = merge(s[i], s[i + half * cols]);
  }
  __syncthreads();
}

// The values of a channel that statistics CTA r of its tile folded (batch_norm_stats_values).
template <typename Acc> __device__ __forceinline__ int64_t stats_cta_count(const BatchNormArgs<Acc>& a, int64_t r) {
  return batch_norm_stats_values(a.chunks, a.stats_ctas, a.chunk, a.n * a.s, r);
}

// The forward's shift K_c of channel ch: its element (n = 0, c, spatial 0), at ch * s
// channels-first and at ch channels-last; 0 where that is not finite (as reduce_stats.cuh's
// pivot) or the channel has no elements. A function of x and the layout alone: every CTA of a
// channel, in every kernel, shifts by the same bits.
template <typename T, typename Acc>
__device__ __forceinline__ Acc channel_shift(const BatchNormArgs<Acc>& a, int64_t ch, bool channels_last) {
  if (a.n * a.s == 0) return Acc(0);
  const Acc v = to_acc<Acc>(static_cast<const T*>(a.x)[channels_last ? ch : ch * a.s]);
  return isfinite(v) ? v : Acc(0);
}

// The apply pass's per-channel parameters: out = p * (x - mean) + q * dy + r.
template <typename Acc> struct ChannelParams {
  Acc mean, p, q, r;
};

// The parameters in the workspace: a row of c a parameter (mean, p, q, r), so that a
// channels-last thread's VEC neighbouring channels are one run of each row and a warp's lanes
// read neighbouring memory (four a channel put each lane's loads on a line of its own).
template <typename Acc>
__device__ __forceinline__ void store_params(Acc* params, int64_t c, int64_t ch, const ChannelParams<Acc>& prm) {
  params[ch] = prm.mean;
  params[c + ch] = prm.p;
  params[2 * c + ch] = prm.q;
  params[3 * c + ch] = prm.r;
}

// row[0 .. N) as 16-byte loads where N values make whole vectors (row 16-byte aligned), else one
// at a time.
template <int N, typename Acc> __device__ __forceinline__ void load_run(const Acc* row, Acc (&v)[N]) {
  if constexpr (N * sizeof(Acc) % 16 == 0) {
    constexpr int kPer = 16 / sizeof(Acc);
#pragma unroll
    for (int i = 0; i < N; i += kPer) {
      const uint4 bits = *reinterpret_cast<const uint4*>(row + i);
      memcpy(&v[i], &bits, sizeof(bits));
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = row[i];
  }
}

// What a channel's merged statistics make: its outputs (save_mean / save_invstd and the running
// statistics, or dweight / dbias; written where write_outputs) and the apply parameters. A
// forward's st.mean is the channel's true mean (K_c added back): y, save_mean and running_mean
// all take it.
template <typename Acc>
__device__ ChannelParams<Acc> finish_channel(const BatchNormArgs<Acc>& a, int64_t ch, const Moments<Acc>& st,
                                             bool write_outputs) {
  const int64_t count = a.n * a.s * a.segment;
  const Acc var = st.m2 / static_cast<Acc>(count);
  const Acc invstd = Acc(1) / sqrt(var + a.eps);
  if (write_outputs) {
    a.save_mean[ch] = st.mean;
    a.save_invstd[ch] = invstd;
    if (a.running_mean != nullptr) {
      const Acc keep = Acc(1) - a.momentum;
      a.running_mean[ch] = keep * a.running_mean[ch] + a.momentum * st.mean;
      a.running_var[ch] = keep * a.running_var[ch] + a.momentum * (st.m2 / static_cast<Acc>(count - 1));
    }
  }
  const Acc w = a.weight != nullptr ? a.weight[ch] : Acc(1);
  return {st.mean, w * invstd, Acc(0), a.bias != nullptr ? a.bias[ch] : Acc(0)};
}

template <typename Acc>
__device__ ChannelParams<Acc> finish_channel(const BatchNormArgs<Acc>& a, int64_t ch, const Sums<Acc>& st,
                                             bool write_outputs) {
  const Acc invstd = a.invstd[ch];
  if (write_outputs) {
    if (a.dbias != nullptr) a.dbias[ch] = st.dy;
    if (a.dweight != nullptr) a.dweight[ch] = st.dy_xc * invstd;
  }
  const Acc k = (a.weight != nullptr ? a.weight[ch] : Acc(1)) * invstd;
  const Acc inv_count = Acc(1) / static_cast<Acc>(a.n * a.s * a.segment);
  return {a.mean[ch], a.batch_statistics ? -k * invstd * invstd * st.dy_xc * inv_count : Acc(0), k,
          a.batch_statistics ? -k * st.dy * inv_count : Acc(0)};
}

// A forward statistics thread's accumulators: for each element place i of its vectors, the sums
// of d = x - shift and of d^2 over the `count` vectors folded (channels-last: a channel a place;
// channels-first: the CTA's one channel in VEC partial sums). shift: K_c plus the mean of the
// thread's first batch, so that d stays within the data's spread and s2 - s1^2 / n keeps its
// digits (K_c alone where that sum is not finite). Two adds and an FMA a value and no division:
// merging exact moments batch by batch left the pass issue-bound.
template <typename Acc, int VEC, int kLanes> struct ShiftedSums {
  Acc shift[kLanes], s1[VEC], s2[VEC];
  int count;  // vectors
};

// The thread's first batch sets the shifts (the sums start empty: the loop folds it again).
template <typename T, int VEC, int U, int kLanes, typename Acc>
__device__ __forceinline__ ShiftedSums<Acc, VEC, kLanes> start_sums(const RawBatch<T, VEC, U, false>& b,
                                                                     const Acc (&center)[kLanes]) {
  ShiftedSums<Acc, VEC, kLanes> acc;
  Acc sum[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    sum[i] = 0;
    acc.s1[i] = 0;
    acc.s2[i] = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < b.count) sum[i] += element<T, VEC, Acc>(b.x[u], i) - center[kLanes == 1 ? 0 : i];
  }
  if constexpr (kLanes == 1)
#pragma unroll
    for (int i = 1; i < VEC; ++i) sum[0] += sum[i];
  const int values = kLanes == 1 ? b.count * VEC : b.count;
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    const Acc shift = center[j] + (values > 0 ? sum[j] / static_cast<Acc>(values) : Acc(0));
    acc.shift[j] = isfinite(shift) ? shift : center[j];
  }
  acc.count = 0;
  return acc;
}

template <typename T, int VEC, int U, int kLanes, typename Acc>
__device__ __forceinline__ void fold_sums(const RawBatch<T, VEC, U, false>& b, ShiftedSums<Acc, VEC, kLanes>& acc) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < b.count)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const Acc d = element<T, VEC, Acc>(b.x[u], i) - acc.shift[kLanes == 1 ? 0 : i];
        acc.s1[i] += d;
        acc.s2[i] = fma(d, d, acc.s2[i]);
      }
  acc.count += b.count;
}

// The thread's moments of x - K_c a lane (channels-first: its VEC places' sums added first).
// An inf in x keeps the mean inf and makes m2 NaN, as the exact moments do.
template <typename Acc, int VEC, int kLanes>
__device__ __forceinline__ void sums_to_moments(const ShiftedSums<Acc, VEC, kLanes>& acc, const Acc (&center)[kLanes],
                                                Moments<Acc> (&st)[kLanes]) {
  Acc s1[kLanes], s2[kLanes];
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    s1[j] = acc.s1[j];
    s2[j] = acc.s2[j];
  }
  if constexpr (kLanes == 1)
#pragma unroll
    for (int i = 1; i < VEC; ++i) {
      s1[0] += acc.s1[i];
      s2[0] += acc.s2[i];
    }
  const int64_t n = int64_t(acc.count) * (kLanes == 1 ? VEC : 1);
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    if (n == 0) {
      st[j] = Moments<Acc>{};
      continue;
    }
    const Acc mean = s1[j] / static_cast<Acc>(n);
    Acc m2 = s2[j] - s1[j] * mean;
    if (m2 < Acc(0)) m2 = 0;  // rounding; NaN stays
    st[j] = {n, (acc.shift[j] - center[j]) + mean, m2};
  }
}

// The backward's sums: center[j], lane j's channel's saved mean.
template <typename T, int VEC, int U, int kLanes, typename Acc>
__device__ __forceinline__ void fold_backward(const RawBatch<T, VEC, U, true>& b, Sums<Acc> (&st)[kLanes],
                                              const Acc (&center)[kLanes]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int j = kLanes == 1 ? 0 : i;
      const Acc g = element<T, VEC, Acc>(b.dy[u], i), v = element<T, VEC, Acc>(b.x[u], i);
      st[j].dy += g;
      st[j].dy_xc += u < b.count ? g * (v - center[j]) : Acc(0);
    }
}

// stats_ctas CTAs a tile, CTA b = r * tiles + tile: CTA r folds chunks r, r + stats_ctas, ... of
// the tile (neighbouring CTAs read neighbouring memory).
template <typename T, BatchNormLayout L, int VEC, bool kBackward>
__global__ void __launch_bounds__(kBatchNormThreads, kBatchNormStatsCtasPerSm)
    batch_norm_stats_kernel(const BatchNormArgs<acc_t<T>> a) {
  using Acc = acc_t<T>;
  using Slot = std::conditional_t<kBackward, Sums<Acc>, Moments<Acc>>;
  constexpr int kLanes = kLanesOf<L, VEC>;
  // Two batches in flight of 64 bytes a thread (x and dy: 32 each) ...; channels-first forwards
  // afford twice that (channels-last threads hold a shift and a K_c for each of VEC channels).
  constexpr int U = batch_norm_unroll(VEC, sizeof(T)) / (kBackward ? 2 : 1) *
                    (!kBackward && kLanes == 1 ? kBatchNormStatsUnrollFactor : 1);
  __shared__ Slot slots[kBatchNormThreads * kLanes];

  const int64_t tile = blockIdx.x % a.tiles, r = blockIdx.x / a.tiles;
  ChunkStream<L, VEC> stream(a, tile, r);

  // Backward: the saved means; forward: the shifts K_c (the partials are moments of x - K_c).
  Slot st[kLanes];
  Acc center[kLanes];
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    st[j] = Slot{};
    center[j] = 0;
    if (stream.walk.column_valid) {
      const int64_t ch = stream.walk.channel + j;
      if constexpr (kBackward) center[j] = a.mean[a.segment == 1 ? ch : ch / a.segment];
      else center[j] = channel_shift<T>(a, ch, L == BatchNormLayout::kChannelsLast);
    }
  }
  // Two batches in flight: the next one loads while the current one folds.
  RawBatch<T, VEC, U, kBackward> first, second;
  fill(first, stream, a);
  std::conditional_t<kBackward, char, ShiftedSums<Acc, VEC, kLanes>> sums;
  if constexpr (!kBackward) sums = start_sums(first, center);
  const auto fold = [&](const RawBatch<T, VEC, U, kBackward>& b) {
    if constexpr (kBackward) fold_backward(b, st, center);
    else fold_sums(b, sums);
  };
  while (first.count > 0) {
    fill(second, stream, a);
    fold(first);
    if (second.count == 0) break;
    fill(first, stream, a);
    fold(second);
  }
  if constexpr (!kBackward) sums_to_moments(sums, center, st);
  // The kernel after this one may launch now (the finalize kernel, launched to overlap, waits
  // for this grid before it reads the partials).
  allow_next_launch();

  // The CTA's partial per channel: thread t's lanes are columns t * kLanes + j of a
  // [256 / W][W * kLanes] table (W = 1 channels-first), merged down its rows.
  const int w = L == BatchNormLayout::kChannelsFirst ? 1 : a.tile_vectors;
  const int cols = w * kLanes;
#pragma unroll
  for (int j = 0; j < kLanes; ++j) slots[threadIdx.x * kLanes + j] = st[j];
  merge_rows(slots, kBatchNormThreads / w, cols);
  const int64_t first_channel = L == BatchNormLayout::kChannelsFirst ? tile : tile * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const int64_t ch = first_channel + j;
    if (ch >= a.c) continue;
    Acc* part = a.partials + (ch * a.stats_ctas + r) * 2;
    if constexpr (kBackward) {
      part[0] = slots[j].dy;
      part[1] = slots[j].dy_xc;
    } else {
      part[0] = slots[j].mean;
      part[1] = slots[j].m2;
    }
  }

}

// A warp a channel: lane l merges partials l, l + 32, ... in order, then the lanes merge
// pairwise down to lane 0, which returns the channel's statistics (the other lanes' results are
// partial). A channel's partials are its columns' (segment of them, a column's stats_ctas in a
// row). Forward partials are moments of x - K (channel_shift of the column): merged shifted
// (means near 0 round by u |mean - K|, not u |mean|), a column's first moved onto the channel's
// first column's K; the caller adds that K back. Every lane of the warp must call it.
template <typename T, bool kBackward>
__device__ std::conditional_t<kBackward, Sums<acc_t<T>>, Moments<acc_t<T>>> merge_channel_partials(
    const BatchNormArgs<acc_t<T>>& a, int64_t ch, int lane) {
  using Acc = acc_t<T>;
  using Slot = std::conditional_t<kBackward, Sums<Acc>, Moments<Acc>>;
  const int64_t partials = a.segment * a.stats_ctas, first_column = ch * a.segment;
  const Acc* part = a.partials + first_column * a.stats_ctas * 2;
  Acc base_shift = 0;
  if constexpr (!kBackward)
    if (a.segment > 1) base_shift = channel_shift<T>(a, first_column, true);
  // Four partials a lane in flight at a time, merged in order.
  constexpr int kBatch = 4;
  Slot total{};
  for (int64_t q0 = lane; q0 < partials; q0 += 32 * kBatch) {
    Acc first[kBatch], second[kBatch], moved[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t q = q0 + 32 * i;
      first[i] = q < partials ? part[2 * q] : Acc(0);
      second[i] = q < partials ? part[2 * q + 1] : Acc(0);
      moved[i] = 0;
      if constexpr (!kBackward)
        if (a.segment > 1 && q < partials)
          moved[i] = channel_shift<T>(a, first_column + q / a.stats_ctas, true) - base_shift;
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t q = q0 + 32 * i;
      if (q >= partials) break;
      if constexpr (kBackward) total = merge(total, Slot{first[i], second[i]});
      else if (a.segment == 1) total = merge(total, Slot{stats_cta_count(a, q), first[i], second[i]});
      else total = merge(total, Slot{stats_cta_count(a, q % a.stats_ctas), moved[i] + first[i], second[i]});
    }
  }
#pragma unroll
  for (int width = 16; width > 0; width /= 2) {
    Slot other;
    if constexpr (kBackward) {
      other.dy = __shfl_down_sync(0xffffffffu, total.dy, width);
      other.dy_xc = __shfl_down_sync(0xffffffffu, total.dy_xc, width);
    } else {
      other.n = __shfl_down_sync(0xffffffffu, total.n, width);
      other.mean = __shfl_down_sync(0xffffffffu, total.mean, width);
      other.m2 = __shfl_down_sync(0xffffffffu, total.m2, width);
    }
    total = merge(total, other);
  }
  return total;
}

// A warp a channel, 8 channels a CTA (merge_channel_partials), lane 0 writing the channel's
// outputs; the apply pass's parameters go to each of the channel's columns (one where segment is 1).
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kBatchNormThreads) batch_norm_finalize_kernel(const BatchNormArgs<acc_t<T>> a) {
  using Acc = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t ch = blockIdx.x * int64_t(kBatchNormThreads / 32) + threadIdx.x / 32;
  // The apply kernel may launch now: it loads its first vectors of x, then waits for this grid.
  allow_next_launch();
  if (ch >= a.c / a.segment) return;
  wait_for_previous_grid();  // the statistics kernel's partials
  auto total = merge_channel_partials<T, kBackward>(a, ch, lane);
  ChannelParams<Acc> prm{};
  if (lane == 0) {
    if constexpr (!kBackward) total.mean += channel_shift<T>(a, ch * a.segment, a.channels_last);
    prm = finish_channel(a, ch, total, true);
  }
  if (a.segment == 1) {
    if (lane == 0) store_params(a.params, a.c, ch, prm);
    return;
  }
  prm.mean = __shfl_sync(0xffffffffu, prm.mean, 0);
  prm.p = __shfl_sync(0xffffffffu, prm.p, 0);
  prm.q = __shfl_sync(0xffffffffu, prm.q, 0);
  prm.r = __shfl_sync(0xffffffffu, prm.r, 0);
  for (int64_t j = lane; j < a.segment; j += 32) store_params(a.params, a.c, ch * a.segment + j, prm);
}

// ---- apply ---------------------------------------------------------------------------------

// Inference's parameters of channel ch from the running statistics: y = p * (x - mean) + r.
template <typename Acc> struct RunningParams {
  Acc mean, p, r, invstd;
};
template <typename Acc>
__device__ __forceinline__ RunningParams<Acc> running_params(const BatchNormArgs<Acc>& a, int64_t ch) {
  const Acc invstd = Acc(1) / sqrt(a.running_var[ch] + a.eps);
  return {a.running_mean[ch], (a.weight != nullptr ? a.weight[ch] : Acc(1)) * invstd,
          a.bias != nullptr ? a.bias[ch] : Acc(0), invstd};
}

// Inference hands the running statistics on as save_mean / save_invstd where asked.
template <typename Acc> __device__ __forceinline__ void save_running(const BatchNormArgs<Acc>& a, int64_t ch) {
  if (a.save_mean != nullptr) a.save_mean[ch] = a.running_mean[ch];
  if (a.save_invstd != nullptr) a.save_invstd[ch] = running_params(a, ch).invstd;
}

// out = p * (x - mean) + q * dy + r per channel. The parameters come from the workspace
// (training forward, backward) or, kFromRunning, from the running statistics (inference, where
// the chunk-0 CTAs also write save_mean / save_invstd). CTAs run in the reverse of the
// statistics kernel's order: its last chunks are still in L2.
template <typename T, BatchNormLayout L, int VEC, bool kBackward, bool kFromRunning>
__global__ void __launch_bounds__(kBatchNormThreads) batch_norm_apply_kernel(const BatchNormArgs<acc_t<T>> a) {
  using Acc = acc_t<T>;
  constexpr int kLanes = kLanesOf<L, VEC>;
  // 16-bit channels-last inference: the tile's parameters (at most 256 channels), a channel a
  // thread, set out in shared memory before any thread leaves: neighbouring lanes load
  // neighbouring channels, and each channel's square root is taken once a CTA, not once a thread.
  // In float32 the loads from global memory ran as fast.
  constexpr bool kTable = kFromRunning && kLanes > 1 && sizeof(T) == 2;
  // 128 bytes a thread in flight (x and dy: 64 each): a 32 KiB chunk is one round; at most 8
  // vectors (scalar rows: each load keeps an offset). The table's kernels: 64 bytes, two rounds
  // (eight channels' parameters in registers: 117 of them at 128 bytes, 71 at 64).
  constexpr int kWanted =
      batch_norm_unroll(VEC, sizeof(T)) * (kBackward || kTable ? 1 : kBatchNormStatsUnrollFactor);
  constexpr int U = kWanted < 8 ? kWanted : 8;
  const int64_t b = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t tile = b % a.tiles, k = b / a.tiles;
  ChunkWalk<L, VEC> walk(a, tile, k);
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* out = static_cast<T*>(a.out);
  __shared__ Acc table[kTable ? 3 : 1][kTable ? kBatchNormThreads : 1];
  if constexpr (kTable) {
    const int width = a.tile_vectors * VEC;
    const int64_t ch = tile * width + threadIdx.x;
    if (int(threadIdx.x) < width && ch < a.c) {
      const RunningParams<Acc> prm = running_params(a, ch);
      table[0][threadIdx.x] = prm.mean;
      table[1][threadIdx.x] = prm.p;
      table[2][threadIdx.x] = prm.r;
    }
    __syncthreads();
  }
  if (!walk.column_valid) return;

  Acc mean[kLanes], p[kLanes], q[kLanes], r[kLanes];
  bool have_params = false;
  while (walk.valid()) {
    RawVector<T, VEC> xr[U], gr[kBackward ? U : 1];
    int64_t offset[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      ok[u] = walk.valid();
      offset[u] = walk.offset;
      if (ok[u]) {
        xr[u] = load_raw<T, VEC, true>(x + offset[u]);
        if constexpr (kBackward) gr[u] = load_raw<T, VEC, true>(dy + offset[u]);
      }
      walk.next(a);
    }
    // The parameters load while the first round's vectors are on their way, once the kernel
    // ahead (the finalize kernel, where launched to overlap it) has written them.
    if (!have_params) {
      have_params = true;
      wait_for_previous_grid();
      if constexpr (kTable) {
        const int column = (threadIdx.x % a.tile_vectors) * VEC;  // the thread's first channel in the tile
        load_run(&table[0][column], mean);
        load_run(&table[1][column], p);
        load_run(&table[2][column], r);
#pragma unroll
        for (int j = 0; j < kLanes; ++j) q[j] = 0;
      } else if constexpr (kFromRunning) {
#pragma unroll
        for (int j = 0; j < kLanes; ++j) {
          const RunningParams<Acc> prm = running_params(a, walk.channel + j);
          mean[j] = prm.mean;
          p[j] = prm.p;
          q[j] = 0;
          r[j] = prm.r;
        }
      } else {
        // walk.channel is a multiple of kLanes, and so is c where kLanes > 1 (16-byte rows).
        load_run(a.params + walk.channel, mean);
        load_run(a.params + a.c + walk.channel, p);
        load_run(a.params + 2 * a.c + walk.channel, q);
        load_run(a.params + 3 * a.c + walk.channel, r);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!ok[u]) continue;
      Acc o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const int j = kLanes == 1 ? 0 : i;
        o[i] = p[j] * (element<T, VEC, Acc>(xr[u], i) - mean[j]) + r[j];
        if constexpr (kBackward) o[i] += q[j] * element<T, VEC, Acc>(gr[u], i);
      }
      store_values<T, VEC>(out + offset[u], o);
    }
  }
  // Inference: the chunk-0 CTAs also hand the running statistics on as save_mean / save_invstd
  // (also for an empty batch, whose CTAs have nothing to apply).
  if constexpr (kFromRunning) {
    const bool writer = k == 0 && (L == BatchNormLayout::kChannelsFirst ? threadIdx.x == 0
                                                                         : int(threadIdx.x) < a.tile_vectors);
    if (writer)
#pragma unroll
      for (int j = 0; j < kLanes; ++j) save_running(a, walk.channel + j);
  }
}

// ---- inference over a flat array -----------------------------------------------------------

// A dense x of `total` elements, `c` channels; channels-first, in planes of `s` (one a sample and
// channel). inv_s and inv_c are 1 / s and 1 / c.
struct BatchNormFlatShape {
  int64_t total = 0, s = 0, c = 0;
  double inv_s = 0, inv_c = 0;
};

// n / d for 0 <= n < 2^50: the double product is within one of the quotient, which one step mends.
__device__ __forceinline__ int64_t quotient(int64_t n, int64_t d, double inv_d) {
  int64_t q = static_cast<int64_t>(static_cast<double>(n) * inv_d);
  if (q * d > n) --q;
  else if ((q + 1) * d <= n) ++q;
  return q;
}

// The channel of a plane (plane = sample * c + channel).
__device__ __forceinline__ int64_t channel_of_plane(int64_t plane, const BatchNormFlatShape& f) {
  return plane - quotient(plane, f.c, f.inv_c) * f.c;
}

// Vectors first, first + 256, ... (U of them, those below `vectors`) of x, streaming.
template <typename T, int VEC, int U>
__device__ __forceinline__ void load_strided(RawVector<T, VEC> (&xr)[U], const T* x, int64_t first, int64_t vectors) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t v = first + u * kBatchNormThreads;
    if (v < vectors) xr[u] = load_raw<T, VEC, true>(x + v * VEC);
  }
}

// Inference over x as one flat array of 16-byte vectors, whatever s >= VEC: each CTA takes a run
// of vectors, first sets out its planes' parameters in shared memory (one channel each, a
// division and a square root a plane, not a vector), and each vector finds its first element's
// plane by one division by reciprocal and, where it crosses into the next plane (at most once:
// s >= VEC), that plane's parameters too. The same arithmetic per element as the chunked apply
// kernel, so the same bits.
// Planes a CTA's run (and the last CTA's tail of fewer than VEC elements) can touch when s >= VEC.
constexpr int kFlatMaxPlanes = kBatchNormThreads * kBatchNormFlatUnroll + 3;

template <typename T, int VEC>
__global__ void __launch_bounds__(kBatchNormThreads)
    batch_norm_inference_flat_kernel(const BatchNormArgs<acc_t<T>> a, const BatchNormFlatShape f) {
  using Acc = acc_t<T>;
  constexpr int U = kBatchNormFlatUnroll;
  __shared__ Acc table[3][kFlatMaxPlanes];  // mean, p, r of the CTA's planes
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.out);
  const int64_t vectors = f.total / VEC;
  const int64_t run = int64_t(blockIdx.x) * kBatchNormThreads * U;
  const int64_t first = run + threadIdx.x;
  RawVector<T, VEC> xr[U];
  load_strided<T, VEC>(xr, x, first, vectors);
  // While the loads fly: the parameters of planes first_plane .. last_plane.
  const bool last_cta = blockIdx.x == gridDim.x - 1;
  const int64_t run_end = last_cta ? f.total : (run + int64_t(kBatchNormThreads) * U) * VEC;
  const int64_t first_plane = quotient(run * VEC, f.s, f.inv_s);
  const int planes = static_cast<int>(quotient(run_end - 1, f.s, f.inv_s) - first_plane) + 1;
  for (int k = threadIdx.x; k < planes; k += kBatchNormThreads) {
    const int64_t plane = first_plane + k;
    const RunningParams<Acc> prm = running_params(a, channel_of_plane(plane, f));
    table[0][k] = prm.mean;
    table[1][k] = prm.p;
    table[2][k] = prm.r;
  }
  __syncthreads();
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t v = first + u * kBatchNormThreads;
    if (v >= vectors) break;
    const int64_t i = v * VEC;
    const int64_t plane = quotient(i, f.s, f.inv_s);
    const int k = static_cast<int>(plane - first_plane);
    const int64_t left = f.s - (i - plane * f.s);  // this plane's elements from i on
    const int in_plane = left < VEC ? static_cast<int>(left) : VEC;
    const int k_next = in_plane < VEC ? k + 1 : k;
    Acc o[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const int at = e < in_plane ? k : k_next;
      o[e] = table[1][at] * (element<T, VEC, Acc>(xr[u], e) - table[0][at]) + table[2][at];
    }
    store_values<T, VEC>(y + i, o);
  }
  // The last CTA: the elements past the last whole vector (fewer than VEC), one a thread.
  const int64_t tail = vectors * VEC + threadIdx.x;
  if (last_cta && tail < f.total) {
    const int k = static_cast<int>(quotient(tail, f.s, f.inv_s) - first_plane);
    const Acc o[1] = {table[1][k] * (to_acc<Acc>(x[tail]) - table[0][k]) + table[2][k]};
    store_values<T, 1>(y + tail, o);
  }
  for (int64_t ch = int64_t(blockIdx.x) * kBatchNormThreads + threadIdx.x; ch < f.c;
       ch += int64_t(gridDim.x) * kBatchNormThreads)
    save_running(a, ch);
}

}  // namespace reducekit::kernels
