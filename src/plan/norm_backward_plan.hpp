// SPDX-License-Identifier: Apache-2.0
// How the fused layer_norm / rms_norm backward (kernels/norm_backward_fused.cuh) lays a row onto
// threads. Host only, no CUDA: the layout depends on the row length and the element size alone
// (never on the row count or the alignment), so dx is batch-invariant and every aligned or
// unaligned tensor gets the same bits.
//
// A thread holds, for each of its tile's elements, x and dy (the row, for dx) and its running
// dweight / dbias partial (over every row its CTA sees): 4 accumulation words an element for
// layer_norm. kFusedTileWords = 16 words per input makes that 64 registers of values, which with
// the rest (ptxas: 61 to 120 in all) stays within the 128 a 512-thread CTA may use, so nothing
// spills. Two shapes:
//   - row lanes (rows of up to 256 threads at 8 values a thread: 16-bit and float32 N <= 2048,
//     float64 N <= 1024): R rows side by side in one CTA, S threads (a power of two, >= 4) a
//     row, S * R = 512 threads (256 for float64, whose 4-vector tiles would double the ring).
//     One-row CTAs of such rows would be small (128 threads at bf16 N = 1024), so few threads
//     per SM under the kFusedMaxCtasPerSm cap, or many partial rows without it; R rows a CTA
//     give R times the threads for the same partial rows.
//   - one row a CTA (R = 1): 128 .. 512 threads, up to kFusedTileWords a thread (16-bit and
//     float32 N <= 8192, float64 N <= 4096). Longer rows take the two-kernel path (dx on the
//     row engine, dweight/dbias by column kernels), although it reads x and dy twice: clusters
//     of 2 to 4 CTAs of this kernel were slower at 4096 x 12800 and 4096 x 32768, each dtype and
//     norm (bench/results/LOG.md), the cluster barriers of every row costing more than the
//     second read.
#pragma once

#include <algorithm>
#include <cstdint>

namespace reducekit {

constexpr int kFusedTileWords = 16;   // accumulation words a thread holds per input
constexpr int kFusedMinThreads = 128;
constexpr int kFusedMaxThreads = 512;  // the kernels' __launch_bounds__
constexpr int kFusedTargetElems = 8;   // per thread while a row fits 512 threads that way
constexpr int kFusedMaxCtasPerSm = 4;  // caps G: more partial rows cost bytes, not speed
constexpr int kFusedMinRowThreads = 4;     // row lanes: the fewest threads a row (as the row engine's warp rows)
constexpr int kFusedMaxRowThreads = 256;   // row lanes: rows needing more threads take a CTA each
constexpr int kFusedRowLaneVectors = 1024;  // row lanes: vectors a CTA (threads x vpt); its ring is 64 KB

// Vectors (16 bytes each) a thread holds at most: 4 (float32, float64), 2 (16-bit). A power of two.
constexpr int fused_max_vpt(int elem_bytes) {
  return kFusedTileWords / ((16 / elem_bytes) * (elem_bytes == 8 ? 2 : 1));
}

// Vectors a thread holds in the row-lane layouts: kFusedTargetElems values, that is 1 (16-bit),
// 2 (float32) or 4 (float64); the only tile the row-lane kernels are instantiated for.
constexpr int fused_row_lane_vpt(int elem_bytes) { return std::max(1, kFusedTargetElems * elem_bytes / 16); }

// Vectors a thread of a one-row layout holds at least: such rows are longer than the row lanes
// hold, on at most kFusedMaxThreads threads: 1 (16-bit), 2 (float32, float64).
constexpr int fused_one_row_min_vpt(int elem_bytes) {
  const int lane_vpt = fused_row_lane_vpt(elem_bytes);
  const int lane_cta = std::min(kFusedMaxThreads, kFusedRowLaneVectors / lane_vpt);
  const int lane_vectors = lane_vpt * std::min(kFusedMaxRowThreads, lane_cta / 2);
  int vpt = 1;
  while (vpt * kFusedMaxThreads <= lane_vectors) vpt *= 2;
  return vpt;
}

struct FusedNormBackwardLayout {
  bool fused = false;    // false: the two-kernel path
  int vec = 1;           // elements per 16-byte vector
  int vpt = 1;           // vectors per thread: 1, 2 or 4 (a kernel template parameter)
  int threads = 0;       // per CTA: rows_per_cta * row_threads
  int rows_per_cta = 1;  // R: rows side by side in a CTA, each on its own row_threads threads
  int row_threads = 0;   // S: threads a row in one CTA; R > 1: a power of two 4 .. 256
  int64_t capacity() const { return int64_t(row_threads) * vpt * vec; }
};

// max_vpt: fused_max_vpt(elem_bytes), or less for tuning sweeps (the norm_bwd_max_vpt override;
// one-row layouts only: the row-lane kernels exist for fused_row_lane_vpt alone).
inline FusedNormBackwardLayout plan_fused_norm_backward(int64_t cols, int elem_bytes, int max_vpt) {
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto pow2_ceil = [](int64_t v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
  };
  FusedNormBackwardLayout l;
  l.vec = 16 / elem_bytes;
  max_vpt = std::clamp(max_vpt, 1, fused_max_vpt(elem_bytes));
  while (max_vpt & (max_vpt - 1)) max_vpt &= max_vpt - 1;  // kernels exist for powers of two
  if (cols < 1) return l;
  const int64_t vectors = ceil_div(cols, l.vec);

  // Row lanes: the fewest power-of-two threads that hold the row at 8 values a thread.
  const int lane_vpt = fused_row_lane_vpt(elem_bytes);
  const int lane_cta = std::min(kFusedMaxThreads, kFusedRowLaneVectors / lane_vpt);
  const int64_t row_threads = std::max<int64_t>(kFusedMinRowThreads, pow2_ceil(ceil_div(vectors, lane_vpt)));
  if (row_threads <= std::min(kFusedMaxRowThreads, lane_cta / 2)) {
    l.vpt = lane_vpt;
    l.row_threads = static_cast<int>(row_threads);
    l.threads = lane_cta;
    l.rows_per_cta = lane_cta / l.row_threads;
    l.fused = true;
    return l;
  }

  // One row a CTA (the rows left have more than 256 vectors), as the row engine: about 8
  // elements a thread up to 512 threads, then more vectors a thread up to max_vpt.
  const int64_t threads = std::clamp<int64_t>(pow2_ceil(ceil_div(cols, kFusedTargetElems)), kFusedMinThreads,
                                              kFusedMaxThreads);
  const int64_t per_thread = ceil_div(vectors, threads);
  if (per_thread > max_vpt) return l;
  l.vpt = pow2_ceil(per_thread);
  // Trim whole warps that would hold only padding.
  l.threads = static_cast<int>(std::min<int64_t>(threads, 32 * ceil_div(ceil_div(vectors, int64_t(l.vpt)), 32)));
  l.row_threads = l.threads;
  l.fused = true;
  return l;
}

}  // namespace reducekit
