// SPDX-License-Identifier: Apache-2.0
// Combines of per-thread statistics across lanes, warps and CTAs: the building blocks the row
// and reduction engines share. Two orders, each fixed, under names that say which:
//   lane_tree_reduce / block_tree_reduce            lower lanes first (shuffle down); the first
//                                                   lane (thread 0) gets the result
//   lane_butterfly_reduce / block_butterfly_reduce  xor butterfly; every lane (thread) gets the
//                                                   same bits (the op's merge is commutative)
// A kernel keeps the one its results were specified with: changing it changes the bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace reducekit::kernels {

// A statistic of WORDS accumulator words (a max and a sum, a mean and a M2, ...).
template <typename Acc, int WORDS> struct StatVec {
  Acc w[WORDS];
};

// Statistics cross lanes as 32-bit words; `move` is one warp shuffle of one word.
template <typename S, class Move> __device__ __forceinline__ S shuffle_stat(const S& s, Move move) {
  static_assert(sizeof(S) % 4 == 0, "statistics move as 32-bit words");
  constexpr int kWords = sizeof(S) / 4;
  uint32_t w[kWords];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = move(w[i]);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

template <typename S> __device__ __forceinline__ S shfl_down_stat(const S& s, int offset, int width) {
  return shuffle_stat(s, [&](uint32_t w) { return __shfl_down_sync(0xffffffffu, w, offset, width); });
}

template <typename S> __device__ __forceinline__ S shfl_stat(const S& s, int src_lane) {
  return shuffle_stat(s, [&](uint32_t w) { return __shfl_sync(0xffffffffu, w, src_lane); });
}

template <typename Acc, int WORDS>
__device__ __forceinline__ StatVec<Acc, WORDS> shfl_xor_stat(StatVec<Acc, WORDS> s, int offset, int width) {
#pragma unroll
  for (int w = 0; w < WORDS; ++w) s.w[w] = __shfl_xor_sync(0xffffffffu, s.w[w], offset, width);
  return s;
}

// Tree over `width` consecutive lanes (a power of two up to 32, uniform over the warp), lower
// lanes first; the first lane of each group gets the result. A width known at compile time
// (lane_tree_reduce<P, WIDTH>) unrolls; one given at run time serves every width with one kernel,
// the same merges in the same order.
template <class P> __device__ __forceinline__ typename P::Stat lane_tree_reduce(typename P::Stat s, int width) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2) s = P::merge(s, shfl_down_stat(s, offset, width));
  return s;
}
template <class P, int WIDTH> __device__ __forceinline__ typename P::Stat lane_tree_reduce(typename P::Stat s) {
  return lane_tree_reduce<P>(s, WIDTH);
}

// Whole CTA, warps' trees then warp 0's; thread 0 gets the result. `slots` holds 32 statistics;
// the caller syncs before reusing them.
template <class P>
__device__ __forceinline__ typename P::Stat block_tree_reduce(typename P::Stat s, typename P::Stat* slots) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  s = lane_tree_reduce<P, 32>(s);
  if (lane == 0) slots[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < static_cast<int>(blockDim.x / 32) ? slots[lane] : P::identity();
    s = lane_tree_reduce<P, 32>(s);
  }
  return s;
}

// Butterfly over `width` consecutive lanes (a power of two up to 32, uniform over the warp; at
// compile time, lane_butterfly_reduce<Op, LANES>, it unrolls). Every lane ends with bitwise the
// same value because each step merges the same two operands and Op::merge is commutative.
template <class Op>
__device__ __forceinline__ typename Op::Stat lane_butterfly_reduce(typename Op::Stat s, int width) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2) s = Op::merge(s, shfl_xor_stat(s, offset, width));
  return s;
}
template <class Op, int LANES> __device__ __forceinline__ typename Op::Stat lane_butterfly_reduce(typename Op::Stat s) {
  return lane_butterfly_reduce<Op>(s, LANES);
}

// Whole CTA, warps' butterflies then warp 0's; every thread gets the result. `slots` holds 33
// statistics in shared memory.
template <class Op>
__device__ __forceinline__ typename Op::Stat block_butterfly_reduce(typename Op::Stat s, typename Op::Stat* slots) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  s = lane_butterfly_reduce<Op, 32>(s);
  if (blockDim.x == 32) return s;
  if (lane == 0) slots[warp] = s;
  __syncthreads();
  if (warp == 0) {
    typename Op::Stat t = lane < static_cast<int>(blockDim.x / 32) ? slots[lane] : Op::identity();
    t = lane_butterfly_reduce<Op, 32>(t);
    if (lane == 0) slots[32] = t;
  }
  __syncthreads();
  return slots[32];
}

}  // namespace reducekit::kernels
