// SPDX-License-Identifier: Apache-2.0
// Fused layer_norm / rms_norm backward: one pass over x and dy writes dx and leaves each CTA's
// partial column sums of dweight (sum of dy * xhat) and dbias (sum of dy: layer_norm's, and
// rms_norm's when it has a bias) in a workspace; a small second kernel adds the partial rows up
// in a fixed order. x and dy are read once, where the two-kernel path (norm_ops.cuh) reads them
// twice.
//
// Thread-to-data layout (plan: plan/norm_backward_plan.hpp). G CTAs of T = R * S threads, R
// sub-groups of S threads each (R = 1 for rows that fill a CTA; R > 1 puts short rows side by
// side, so a CTA is not left small). Sub-group j of CTA g takes rows g*R + j, g*R + j + G*R, ...
// and lays each row out as the row engine would on S threads (thread me owns vectors me,
// me + S, me + 2S, ...):
//
//   CTA g:  | sub 0: row gR    | sub 1: row gR+1    | ... | sub R-1: row gR+R-1    |   step 0
//           | sub 0: row gR+GR | sub 1: row gR+GR+1 | ... | sub R-1: row gR+GR+R-1 |   step 1
//
// so a thread meets the same columns on every row, and its dweight/dbias partials stay in
// registers from the first row to the last. A row's statistic is reduced over its sub-group
// only, in an order fixed by S (butterfly within S <= 32 lanes; for S = 32W, W warp sums in
// warp order), so dx depends on the row length and dtype alone (batch-invariant). At the end the
// R sub-groups' partials of each column are added in sub-group order through shared memory, and
// CTA g writes partial row g ([G, cols] for dweight, then [G, cols] for dbias);
// norm_param_grad_sum_kernel (norm_ops.cuh) adds the G rows of each column in an order fixed by
// G. G depends on the row length, the dtype and the device (occupancy), and on the row count
// only through min(G, ceil(rows / R)): no atomics, the same bits from run to run. The whole CTA
// walks the steps together (sub-groups past the last row take part with an empty row), so
// shuffles and barriers stay uniform.
//
// While one step is reduced, the next kFusedRing steps stream into shared memory (cp.async,
// the engine's RowTile::prefetch), so memory stays busy across the reduction barriers. In-place
// dx (dx is dy or x) is safe: a thread writes only the elements it has already read, and
// prefetched rows are other rows.
#pragma once

#include <cstddef>

#include "kernels/norm_ops.cuh"
#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

constexpr int kFusedRing = 2;  // rows in flight ahead of the one reduced (an immediate for wait_prior)

// Shared memory of the ring: kFusedRing rows of a CTA's share of x and dy.
inline std::size_t fused_ring_bytes(int threads, int vpt) {
  return std::size_t(kFusedRing) * 2 * vpt * threads * 16;
}

// Reduces s over each sub-group of `row_threads` consecutive threads (LANES = min(row_threads,
// 32)); every thread of a sub-group gets the same bits. Sub-groups of several warps meet in
// `slots` (a warp each) behind one barrier; callers alternate between two slot arrays, so a
// fast warp's next write cannot land before every thread has read this step's (it would first
// have to pass the next step's barrier, which waits for all of them).
template <class Op, int LANES>
__device__ __forceinline__ typename Op::Stat row_lanes_reduce(typename Op::Stat s, typename Op::Stat* slots,
                                                              int row_threads) {
  s = lane_butterfly_reduce<Op, LANES>(s);
  if constexpr (LANES < 32) {
    return s;
  } else {
    if (row_threads == 32) return s;
    const int warp = threadIdx.x / 32, warps = row_threads / 32;
    if (threadIdx.x % 32 == 0) slots[warp] = s;
    __syncthreads();
    const int first = warp - warp % warps;
    typename Op::Stat r = slots[first];
    for (int q = 1; q < warps; ++q) r = Op::merge(r, slots[first + q]);
    return r;
  }
}

// row_threads: S (must equal LANES when LANES < 32). partial: [2][G][cols] accumulation words
// (dweight, then dbias when kBias), partial row g belonging to CTA g, or null when only dx is
// wanted. args.out null: only the partials are wanted. kBias is a template argument, not a
// flag, so rms_norm without a bias keeps its registers free of the dbias partials.
template <typename T, bool kLayer, bool kBias, int VPT, int LANES, bool kAligned>
__global__ void __launch_bounds__(kMaxBlockThreads)
norm_backward_fused_kernel(RowArgs<T, 2> args, NormExtra<T> extra, acc_t<T>* partial, int row_threads) {
  using Op = NormBackwardOp<T, kLayer>;
  using Acc = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  using Tile = RowTile<T, 2, VEC, VPT, kAligned>;
  constexpr int E = Tile::kElems;
  constexpr int kParts = kBias ? 2 : 1;  // dweight, dbias
  // The combine reuses the ring: kParts x T x E words must fit kFusedRing x 2 x T x VPT packs.
  static_assert(kParts * VEC * sizeof(Acc) <= kFusedRing * 2 * 16, "row-lane partials fit the ring");
  __shared__ typename Op::Stat slots[2][kMaxBlockThreads / 32];
  extern __shared__ __align__(16) unsigned char ring_bytes[];
  auto* ring = reinterpret_cast<typename Tile::PackT*>(ring_bytes);

  const int S = LANES < 32 ? LANES : row_threads;
  const int threads = blockDim.x;
  const int R = threads / S;
  const int sub = threadIdx.x / S, me = threadIdx.x % S;
  const int slot_stride = 2 * VPT * threads;
  const int cols = args.cols;
  const int64_t row_step = int64_t(gridDim.x) * R;
  const int64_t first = int64_t(blockIdx.x) * R;
  const bool want_dx = args.out != nullptr;  // uniform: the branches below may hold barriers
  const bool want_params = partial != nullptr;

  auto fetch = [&](int64_t base, int slot) {
    const int64_t row = base + sub;
    if (row < args.rows) {
      const T* in[2] = {args.in[0] + row * args.in_stride[0], args.in[1] + row * args.in_stride[1]};
      Tile::prefetch(in, cols, me, S, ring + slot * slot_stride, threadIdx.x, threads);
    }
    __pipeline_commit();  // one group per step, empty past the end, so the counting holds
  };
#pragma unroll
  for (int k = 0; k < kFusedRing; ++k) fetch(first + k * row_step, k);

  Acc dw[E], db[E];
#pragma unroll
  for (int j = 0; j < E; ++j) dw[j] = db[j] = Acc(0);

  int slot = 0, parity = 0;
  for (int64_t base = first; base < args.rows; base += row_step, slot = (slot + 1) % kFusedRing) {
    const int64_t row = base + sub;
    const bool live = row < args.rows;
    __pipeline_wait_prior(kFusedRing - 1);  // this step's group is in
    Tile tile;
    if (live) tile.template unstash<Op>(ring + slot * slot_stride, cols, me, S, threadIdx.x, threads);
    fetch(base + kFusedRing * row_step, slot);

    if (want_params && live) {
      const Acc mean = kLayer ? extra.saved_mean[row] : Acc(0);
      const Acc rstd = extra.saved_rstd[row];
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const Acc dy = tile.values[1][j];
        dw[j] += dy * ((tile.values[0][j] - mean) * rstd);
        if constexpr (kBias) db[j] += dy;
      }
    }
    if (want_dx) {
      const RowSpan span{row, me, S, cols, kAligned};
      const typename Op::Stat mine = live ? Op::fold(extra, span, tile.values) : Op::identity();
      const typename Op::Stat stat = row_lanes_reduce<Op, LANES>(mine, slots[parity], S);
      parity ^= 1;
      if constexpr (!Tile::kShareGranules) {
        if (live) {
          const typename Op::Params p = Op::finalize(extra, span, stat);
          tile.template store<Op>(args.out + row * args.out_stride, nullptr, cols, me, S, Op::local(p, mine), extra);
        }
      } else {  // the shifted store shuffles: every lane takes part, rows past the end with no columns
        typename Op::Params p{};
        if (live) p = Op::finalize(extra, span, stat);
        tile.template store<Op>(args.out + (live ? row : 0) * args.out_stride, nullptr, live ? cols : 0, me, S,
                                Op::local(p, mine), extra);
      }
    }
  }

  if (!want_params) return;
  // Sub-group partials to shared memory as [part][sub][column], C = S * E columns a sub-group
  // (its capacity), over the ring: its last groups are empty, and the barrier keeps every
  // thread's last ring read before the first write.
  __pipeline_wait_prior(0);
  __syncthreads();
  Acc* sums = reinterpret_cast<Acc*>(ring_bytes);
  const int C = S * E;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e0 = (me + k * S) * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      sums[sub * C + e0 + e] = dw[k * VEC + e];
      if constexpr (kBias) sums[(R + sub) * C + e0 + e] = db[k * VEC + e];
    }
  }
  __syncthreads();
  Acc* dw_row = partial + int64_t(blockIdx.x) * cols;
  Acc* db_row = partial + (int64_t(gridDim.x) + blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += threads) {  // cols <= C
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      const Acc* col = sums + part * R * C + c;
      Acc t = col[0];
      for (int j = 1; j < R; ++j) t += col[j * C];  // sub-group order, whatever the row count
      (part == 0 ? dw_row : db_row)[c] = t;
    }
  }
}

}  // namespace reducekit::kernels
