// SPDX-License-Identifier: Apache-2.0
// batch_norm's single-read path (plan_batch_norm_resident in plan/batch_norm_plan.hpp): a cluster
// of CTAs a channel, each holding its share of the channel in shared memory.
//
//   1. stage: whole 16-byte granules arrive by cp.async, a piece's partial end granules element
//      by element (nothing outside x is read);
//   2. fold: forward, the CTA's exact two-pass (count, mean, M2); backward, sum(dy) and
//      sum(dy * (x - mean));
//   3. merge: every CTA reads the cluster's partials through distributed shared memory and merges
//      them in rank order, so all hold the same bits; rank 0 writes the channel's outputs;
//   4. apply: y (or dx) from the shared copy, whole granules as 16-byte stores.
//
// A slot mirrors the granules of global memory its piece touches, and the outputs sit at x's
// offset from a 16-byte boundary (the plan's condition), so a granule of x, dy and the output
// share one index.
#pragma once

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <cstdint>
#include <cstring>

#include "kernels/batch_norm.cuh"

namespace reducekit::kernels {

struct BatchNormResidentArgs {
  int64_t pieces = 0, parts = 1, piece = 0, pieces_per_cta = 0, slot_granules = 0;
  int cluster = 1;
};

// Granule g of a CTA's slots: where it lies against its piece and against x's base.
struct ResidentGranule {
  int64_t delta;  // the granule's address minus x's (y's, dy's): the same for every tensor
  int lo;         // its first byte's offset from the piece's first byte (negative: bytes before the piece)
  int bytes;      // the piece's bytes
  __device__ __forceinline__ bool beyond() const { return lo >= bytes; }
  __device__ __forceinline__ bool whole() const { return lo >= 0 && lo + 16 <= bytes; }
  __device__ __forceinline__ bool holds(int byte) const { return byte >= 0 && byte < bytes; }
};

template <typename T, typename Acc>
__device__ __forceinline__ ResidentGranule resident_granule(const BatchNormArgs<Acc>& a, const BatchNormResidentArgs& r,
                                                            int64_t channel, int64_t first_piece, int g) {
  const int j = g / static_cast<int>(r.slot_granules);
  const int gi = g - j * static_cast<int>(r.slot_granules);
  const int64_t i = first_piece + j;
  const int64_t run = r.parts == 1 ? i : static_cast<int>(i) / static_cast<int>(r.parts);  // < 2^31 pieces
  const int64_t start = (i - run * r.parts) * r.piece;
  const int64_t offset_bytes = ((run * a.c + channel) * a.s + start) * int64_t(sizeof(T));
  const int lead = static_cast<int>((reinterpret_cast<uintptr_t>(a.x) + offset_bytes) & 15);
  ResidentGranule q;
  q.lo = gi * 16 - lead;
  q.delta = offset_bytes + q.lo;
  q.bytes = static_cast<int>(min(r.piece, a.s - start)) * int(sizeof(T));
  return q;
}

// Starts the copy of granule q of `src` into `slot`: whole granules asynchronously, the partial
// ends of a piece element by element.
template <typename T>
__device__ __forceinline__ void stage_granule(uint4* slot, const void* src, const ResidentGranule& q) {
  const char* g = static_cast<const char*>(src) + q.delta;
  if (q.whole()) {
    __pipeline_memcpy_async(slot, g, 16);
    return;
  }
  T* dst = reinterpret_cast<T*>(slot);
#pragma unroll
  for (int e = 0; e < int(16 / sizeof(T)); ++e)
    if (q.holds(q.lo + e * int(sizeof(T)))) dst[e] = reinterpret_cast<const T*>(g)[e];
}

template <typename T, typename Acc> __device__ __forceinline__ Acc slot_element(const uint4& v, int e) {
  T el[16 / sizeof(T)];
  memcpy(el, &v, sizeof(v));
  return to_acc<Acc>(el[e]);
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

template <typename T, bool kBackward>
__global__ void __launch_bounds__(kBatchNormResidentThreads)
    batch_norm_resident_kernel(const BatchNormArgs<acc_t<T>> a, const BatchNormResidentArgs r) {
  using Acc = acc_t<T>;
  using Slot = std::conditional_t<kBackward, Sums<Acc>, Moments<Acc>>;
  constexpr int E = 16 / sizeof(T);
  namespace cg = cooperative_groups;
  extern __shared__ uint4 slots[];
  __shared__ Acc scratch[kBatchNormResidentThreads / 32];
  __shared__ int64_t count_scratch[kBatchNormResidentThreads / 32];
  __shared__ Slot partial;
  __shared__ ChannelParams<Acc> params;

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t channel = blockIdx.x / r.cluster;
  const int64_t first_piece = rank * r.pieces_per_cta;
  const int granules = static_cast<int>(min(r.pieces_per_cta, r.pieces - first_piece) * r.slot_granules);
  uint4* dy_slots = slots + r.pieces_per_cta * r.slot_granules;

  // 1. Stage x (and dy).
  for (int g = threadIdx.x; g < granules; g += blockDim.x) {
    const ResidentGranule q = resident_granule<T>(a, r, channel, first_piece, g);
    if (q.beyond()) continue;
    stage_granule<T>(slots + g, a.x, q);
    if constexpr (kBackward) stage_granule<T>(dy_slots + g, a.dy, q);
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();

  // 2. Fold the CTA's share.
  Slot mine{};
  if constexpr (kBackward) {
    const Acc mean = a.mean[channel];
    Acc sum_dy = 0, sum_dy_xc = 0;
    for (int g = threadIdx.x; g < granules; g += blockDim.x) {
      const ResidentGranule q = resident_granule<T>(a, r, channel, first_piece, g);
      if (q.beyond()) continue;
      const uint4 xv = slots[g], gv = dy_slots[g];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        if (!q.whole() && !q.holds(q.lo + e * int(sizeof(T)))) continue;
        const Acc dy = slot_element<T, Acc>(gv, e);
        sum_dy += dy;
        sum_dy_xc += dy * (slot_element<T, Acc>(xv, e) - mean);
      }
    }
    mine.dy = resident_block_sum(sum_dy, scratch);
    mine.dy_xc = resident_block_sum(sum_dy_xc, scratch);
  } else {
    Acc sum = 0;
    int64_t count = 0;
    for (int g = threadIdx.x; g < granules; g += blockDim.x) {
      const ResidentGranule q = resident_granule<T>(a, r, channel, first_piece, g);
      if (q.beyond()) continue;
      const uint4 xv = slots[g];
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (q.whole() || q.holds(q.lo + e * int(sizeof(T)))) {
          sum += slot_element<T, Acc>(xv, e);
          ++count;
        }
    }
    mine.n = resident_block_sum(count, count_scratch);
    mine.mean = resident_block_sum(sum, scratch) / static_cast<Acc>(mine.n);
    Acc m2 = 0;
    for (int g = threadIdx.x; g < granules; g += blockDim.x) {
      const ResidentGranule q = resident_granule<T>(a, r, channel, first_piece, g);
      if (q.beyond()) continue;
      const uint4 xv = slots[g];
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (q.whole() || q.holds(q.lo + e * int(sizeof(T)))) {
          const Acc d = slot_element<T, Acc>(xv, e) - mine.mean;
          m2 += d * d;
        }
    }
    mine.m2 = resident_block_sum(m2, scratch);
  }

  // 3. Merge the cluster's partials in rank order (each CTA alike), then hold this CTA's partial
  // until every CTA of the cluster has read it.
  if (threadIdx.x == 0) partial = mine;
  cluster.sync();
  if (threadIdx.x == 0) {
    Slot total{};
    for (int k = 0; k < r.cluster; ++k) total = merge(total, *cluster.map_shared_rank(&partial, k));
    params = finish_channel(a, channel, total, rank == 0);
  }
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  __syncthreads();
  const ChannelParams<Acc> prm = params;

  // 4. Apply from the shared copy (a backward without dx stops at its sums).
  T* out = static_cast<T*>(a.out);
  for (int g = threadIdx.x; out != nullptr && g < granules; g += blockDim.x) {
    const ResidentGranule q = resident_granule<T>(a, r, channel, first_piece, g);
    if (q.beyond()) continue;
    const uint4 xv = slots[g];
    uint4 gv{};
    if constexpr (kBackward) gv = dy_slots[g];
    T o[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      Acc v = prm.p * (slot_element<T, Acc>(xv, e) - prm.mean) + prm.r;
      if constexpr (kBackward) v += prm.q * slot_element<T, Acc>(gv, e);
      o[e] = from_acc<T>(v);
    }
    T* dst = reinterpret_cast<T*>(reinterpret_cast<char*>(out) + q.delta);
    if (q.whole()) {
      uint4 bits;
      memcpy(&bits, o, sizeof(bits));
      __stcs(reinterpret_cast<uint4*>(dst), bits);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (q.holds(q.lo + e * int(sizeof(T)))) dst[e] = o[e];
    }
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

}  // namespace reducekit::kernels
