// SPDX-License-Identifier: Apache-2.0
// batch_norm's single-read path (plan_batch_norm_resident in plan/batch_norm_plan.hpp): a cluster
// of CTAs a channel, each holding its share of the channel in shared memory.
//
//   1. stage: the 16-byte granules a piece touches arrive by cp.async (a granule shared with the
//      neighbouring channel's run comes whole; its other bytes go unused), element by element
//      only at the tensor's two ends, so nothing outside x is read;
//   2. fold: forward, the CTA's exact two-pass (count, mean, M2) of x - K_c (K_c: channel_shift,
//      the same element in every CTA); backward, sum(dy) and sum(dy * (x - mean));
//   3. merge: every CTA reads the cluster's partials through distributed shared memory and merges
//      them in rank order, so all hold the same bits, and adds K_c back to the mean (merged raw,
//      means near 1e4 cost the variance u |mean| / std); rank 0 writes the channel's outputs;
//   4. apply: y (or dx) from the shared copy, whole granules as 16-byte stores.
//
// A slot mirrors the granules of global memory its piece touches, and the outputs sit at x's
// offset from a 16-byte boundary (the plan's condition), so a granule of x, dy and the output
// share one index. A group of lanes (as many as a piece has granules, up to a warp) walks a
// piece, so a piece's addresses are worked out once per group, not per granule.
#pragma once

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <cstdint>

#include "kernels/batch_norm.cuh"

namespace reducekit::kernels {

// A piece of the channel, as a group of lanes walks it: its granules' addresses relative to the
// tensors' bases, and where its bytes lie in them.
struct ResidentPiece {
  int64_t first;  // the address of its first granule minus x's (y's, dy's): one offset for all
  int lead;       // bytes of the first granule before the piece
  int bytes;      // the piece's bytes
  int granules;   // granules it touches
  // The piece's elements of granule gi: [lo, hi) of its E.
  template <int kElem> __device__ __forceinline__ void span(int gi, int& lo, int& hi) const {
    lo = max(lead - gi * 16, 0) / kElem;
    hi = min(lead + bytes - gi * 16, 16) / kElem;
  }
};

template <typename T, typename Acc>
__device__ __forceinline__ ResidentPiece resident_piece(const BatchNormArgs<Acc>& a, const BatchNormResidentPlan& r,
                                                        int64_t channel, int64_t i) {
  const int64_t run = r.parts == 1 ? i : static_cast<int>(i) / static_cast<int>(r.parts);  // < 2^31 pieces
  const int64_t start = (i - run * r.parts) * r.piece;
  const int64_t offset = ((run * a.c + channel) * a.s + start) * int64_t(sizeof(T));
  ResidentPiece p;
  p.lead = static_cast<int>((reinterpret_cast<uintptr_t>(a.x) + offset) & 15);
  p.first = offset - p.lead;
  p.bytes = static_cast<int>(min(r.piece, a.s - start)) * int(sizeof(T));
  p.granules = (p.lead + p.bytes + 15) / 16;
  return p;
}

// Granule gi of piece p of `src` (a tensor of `total` bytes) into `slot`: by cp.async where the
// granule lies inside the tensor (bytes of neighbouring pieces come along, unused), element by
// element at the tensor's two ends.
template <typename T>
__device__ __forceinline__ void stage_granule(uint4* slot, const void* src, int64_t total, const ResidentPiece& p,
                                              int gi) {
  const int64_t at = p.first + gi * 16;
  const char* g = static_cast<const char*>(src) + at;
  if (at >= 0 && at + 16 <= total) {
    __pipeline_memcpy_async(slot, g, 16);
    return;
  }
  T* dst = reinterpret_cast<T*>(slot);
  int lo, hi;
  p.span<sizeof(T)>(gi, lo, hi);
  for (int e = lo; e < hi; ++e) dst[e] = reinterpret_cast<const T*>(g)[e];
}

// Sum over the CTA in a fixed order; every thread gets the same bits. `scratch`: a slot a warp.
template <typename V> __device__ __forceinline__ V resident_block_sum(V v, V* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  V total = scratch[0];
#pragma unroll
  for (int w = 1; w < kBatchNormResidentThreads / 32; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// f(piece, gi, slot index, lo, hi) for every granule of the CTA's pieces [from, to), the piece's
// elements of the granule being [lo, hi): a group of r.group lanes a piece, lane l of it at
// granules l, l + group, ...
template <typename T, typename Acc, class F>
__device__ __forceinline__ void for_each_granule(const BatchNormArgs<Acc>& a, const BatchNormResidentPlan& r,
                                                 int64_t channel, int64_t first_piece, int from, int to, F f) {
  const int groups = kBatchNormResidentThreads / r.group, lane = threadIdx.x % r.group;
  for (int j = from + static_cast<int>(threadIdx.x) / r.group; j < to; j += groups) {
    const ResidentPiece p = resident_piece<T>(a, r, channel, first_piece + j);
    const int slot0 = j * static_cast<int>(r.slot_granules);
    for (int gi = lane; gi < p.granules; gi += r.group) {
      int lo, hi;
      p.span<sizeof(T)>(gi, lo, hi);
      f(p, gi, slot0 + gi, lo, hi);
    }
  }
}

// f over the CTA's pieces as the two staged halves arrive: [0, half) once the first cp.async group
// is in, then [half, local).
template <typename T, typename Acc, class F>
__device__ __forceinline__ void fold_as_staged(const BatchNormArgs<Acc>& a, const BatchNormResidentPlan& r,
                                               int64_t channel, int64_t first_piece, int half, int local, F f) {
  __pipeline_wait_prior(1);
  __syncthreads();
  for_each_granule<T>(a, r, channel, first_piece, 0, half, f);
  __pipeline_wait_prior(0);
  __syncthreads();
  for_each_granule<T>(a, r, channel, first_piece, half, local, f);
}

// Elements of a CTA's pieces [first, first + local): whole pieces, less what each run's last
// piece lacks.
__device__ __forceinline__ int64_t resident_count(const BatchNormResidentPlan& r, int64_t s, int64_t first, int local) {
  const int64_t last_pieces = (first + local) / r.parts - first / r.parts;
  return local * r.piece - last_pieces * (r.parts * r.piece - s);
}

// Three CTAs an SM at the smallest tier: at most 40 registers.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kBatchNormResidentThreads, 3)
    batch_norm_resident_kernel(const BatchNormArgs<acc_t<T>> a, const BatchNormResidentPlan r) {
  using Acc = acc_t<T>;
  using Slot = std::conditional_t<kBackward, Sums<Acc>, Moments<Acc>>;
  constexpr int E = 16 / sizeof(T);
  constexpr int kWarps = kBatchNormResidentThreads / 32;
  namespace cg = cooperative_groups;
  extern __shared__ uint4 slots[];
  __shared__ Acc scratch[kWarps];
  __shared__ Slot partial;
  // Forward: K_c, set by thread 0 before fold_as_staged's first barrier. In shared memory, not a
  // register: held through the fold in a register, it spilled the float64 kernel at 40.
  __shared__ Acc shift;
  __shared__ ChannelParams<Acc> params;

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t channel = blockIdx.x / r.cluster;
  const int64_t first_piece = rank * r.pieces_per_cta;
  const int local = static_cast<int>(min(r.pieces_per_cta, r.pieces - first_piece));
  uint4* dy_slots = slots + r.pieces_per_cta * r.slot_granules;
  const int64_t total = a.n * a.c * a.s * int64_t(sizeof(T));

  // 1. Stage x (and dy) in two halves, so that the first is folded while the second arrives.
  const int half = local / 2;
  const auto stage = [&](const ResidentPiece& p, int gi, int g, int, int) {
    stage_granule<T>(slots + g, a.x, total, p, gi);
    if constexpr (kBackward) stage_granule<T>(dy_slots + g, a.dy, total, p, gi);
  };
  for_each_granule<T>(a, r, channel, first_piece, 0, half, stage);
  __pipeline_commit();
  for_each_granule<T>(a, r, channel, first_piece, half, local, stage);
  __pipeline_commit();

  // 2. Fold the CTA's share (forward: of x - K_c, K_c loaded while the stage is in flight).
  if (!kBackward && threadIdx.x == 0) shift = channel_shift<T>(a, channel, false);
  Slot mine{};
  if constexpr (kBackward) {
    const Acc mean = a.mean[channel];
    Acc sum_dy = 0, sum_dy_xc = 0;
    const auto fold = [&](const ResidentPiece&, int, int g, int lo, int hi) {
      const uint4 xv = slots[g], gv = dy_slots[g];
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (e >= lo && e < hi) {
          const Acc dy = element<T, E, Acc>(gv, e);
          sum_dy += dy;
          sum_dy_xc += dy * (element<T, E, Acc>(xv, e) - mean);
        }
    };
    fold_as_staged<T>(a, r, channel, first_piece, half, local, fold);
    mine.dy = resident_block_sum(sum_dy, scratch);
    mine.dy_xc = resident_block_sum(sum_dy_xc, scratch);
  } else {
    // Moments of x - K_c: the cluster's merge then sees means near 0.
    Acc sum = 0;
    const auto fold_sum = [&](const ResidentPiece&, int, int g, int lo, int hi) {
      const uint4 xv = slots[g];
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (e >= lo && e < hi) sum += element<T, E, Acc>(xv, e) - shift;
    };
    fold_as_staged<T>(a, r, channel, first_piece, half, local, fold_sum);
    mine.n = resident_count(r, a.s, first_piece, local);
    mine.mean = resident_block_sum(sum, scratch) / static_cast<Acc>(mine.n);
    Acc m2 = 0;
    for_each_granule<T>(a, r, channel, first_piece, 0, local, [&](const ResidentPiece&, int, int g, int lo, int hi) {
      const uint4 xv = slots[g];
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (e >= lo && e < hi) {
          const Acc d = (element<T, E, Acc>(xv, e) - shift) - mine.mean;
          m2 += d * d;
        }
    });
    mine.m2 = resident_block_sum(m2, scratch);
  }

  // 3. Merge the cluster's partials in rank order (each CTA alike), then hold this CTA's partial
  // until every CTA of the cluster has read it.
  if (threadIdx.x == 0) partial = mine;
  cluster.sync();
  if (threadIdx.x == 0) {
    Slot merged{};
    for (int k = 0; k < r.cluster; ++k) merged = merge(merged, *cluster.map_shared_rank(&partial, k));
    if constexpr (!kBackward) merged.mean += shift;
    params = finish_channel(a, channel, merged, rank == 0);
  }
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  __syncthreads();
  const ChannelParams<Acc> prm = params;

  // 4. Apply from the shared copy (a backward without dx stops at its sums).
  if (a.out != nullptr)
    for_each_granule<T>(a, r, channel, first_piece, 0, local, [&](const ResidentPiece& p, int gi, int g, int lo, int hi) {
      const uint4 xv = slots[g];
      uint4 gv{};
      if constexpr (kBackward) gv = dy_slots[g];
      Acc o[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        o[e] = prm.p * (element<T, E, Acc>(xv, e) - prm.mean) + prm.r;
        if constexpr (kBackward) o[e] += prm.q * element<T, E, Acc>(gv, e);
      }
      T* dst = reinterpret_cast<T*>(static_cast<char*>(a.out) + p.first + gi * 16);
      if (lo == 0 && hi == E) {
        store_values<T, E>(dst, o);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e)
          if (e >= lo && e < hi) dst[e] = from_acc<T>(o[e]);
      }
    });
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

}  // namespace reducekit::kernels
