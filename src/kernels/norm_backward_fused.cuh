// Fused layer_norm / rms_norm backward: one pass over x and dy writes dx and leaves each CTA's
// partial column sums of dweight (sum of dy * xhat) and dbias (sum of dy) in a workspace; a
// small second kernel adds the partial rows up in a fixed order. x and dy are read once, where
// the two-kernel path (norm_ops.cuh) reads them twice.
//
// Thread-to-data layout (plan: ops/norm_backward_plan.hpp). G groups, each one CTA or a cluster
// of C CTAs; group g takes rows g, g + G, g + 2G, ... Inside a row, thread t of the CTA with
// cluster rank r owns vectors me, me + S, me + 2S, ... with me = r * T + t and S = T * C, as in
// the row engine:
//
//   row g:       | t0 t1 .. tS-1 | t0 t1 .. tS-1 | ...     (slot 0, slot 1, ... of a tile)
//   row g + G:   | t0 t1 .. tS-1 | t0 t1 .. tS-1 | ...     same columns, same threads
//
// so a thread meets the same columns on every row, and its dweight/dbias partials stay in
// registers from the first row to the last. At the end, group g writes partial row g
// ([G, cols] for dweight, then [G, cols] for dbias); norm_param_grad_sum_kernel (norm_ops.cuh)
// adds the G rows of each column in an order fixed by G. G depends on the row length, the dtype and the device
// (occupancy), and on the row count only through min(G, rows): no atomics, results are the
// same bits from run to run.
//
// dx uses NormBackwardOp's fold / finalize / output (the row engine's arithmetic) on the same
// layout whatever the row count, so dx is batch-invariant. While one row is reduced, the next
// kFusedRing rows stream into shared memory (cp.async, the engine's RowTile::prefetch), so
// memory stays busy across the reduction barriers. In-place dx (dx is dy or x) is safe: a
// thread writes only the elements it has already read, and prefetched rows are other rows.
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

// partial: [2][G][cols] accumulation words (dweight, then dbias for layer_norm), or null when
// only dx is wanted. args.out null: only the partials are wanted.
template <typename T, bool kLayer, int VPT, bool kAligned>
__global__ void __launch_bounds__(kMaxBlockThreads)
norm_backward_fused_kernel(RowArgs<T, 2> args, NormExtra<T> extra, acc_t<T>* partial) {
  using Op = NormBackwardOp<T, kLayer>;
  using Acc = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  using Tile = RowTile<T, 2, VEC, VPT, kAligned>;
  constexpr int E = Tile::kElems;
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_slot;
  extern __shared__ __align__(16) unsigned char ring_bytes[];
  auto* ring = reinterpret_cast<typename Tile::PackT*>(ring_bytes);

  const RowPlace at = row_place();
  const int cluster_size = at.cluster_size, step = at.step, me = at.me;
  const int threads = blockDim.x;
  const int slot_stride = 2 * VPT * threads;
  const int cols = args.cols;
  const int64_t groups = at.groups;
  const int64_t group = at.first;
  const bool want_dx = args.out != nullptr;  // uniform: the branches below may hold barriers
  const bool want_params = partial != nullptr;

  auto fetch = [&](int64_t row, int slot) {
    if (row < args.rows) {
      const T* in[2] = {args.in[0] + row * args.in_stride[0], args.in[1] + row * args.in_stride[1]};
      Tile::prefetch(in, cols, me, step, ring + slot * slot_stride, threadIdx.x, threads);
    }
    __pipeline_commit();  // one group per row, empty past the end, so the counting holds
  };
#pragma unroll
  for (int k = 0; k < kFusedRing; ++k) fetch(group + k * groups, k);

  Acc dw[E], db[E];
#pragma unroll
  for (int j = 0; j < E; ++j) dw[j] = db[j] = Acc(0);

  int slot = 0;
  for (int64_t row = group; row < args.rows; row += groups, slot = (slot + 1) % kFusedRing) {
    __pipeline_wait_prior(kFusedRing - 1);  // this row's group is in
    Tile tile;
    tile.template unstash<Op>(ring + slot * slot_stride, cols, me, step, threadIdx.x, threads);
    fetch(row + kFusedRing * groups, slot);

    if (want_params) {
      // Before fold, which turns dy into dy * w. Pads (x = dy = 0) add 0 to columns that are
      // never written.
      const Acc mean = kLayer ? extra.saved_mean[row] : Acc(0);
      const Acc rstd = extra.saved_rstd[row];
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const Acc dy = tile.values[1][j];
        dw[j] += dy * ((tile.values[0][j] - mean) * rstd);
        if constexpr (kLayer) db[j] += dy;
      }
    }
    if (want_dx) {
      const RowSpan span{row, me, step, cols, kAligned};
      const typename Op::Stat mine = Op::fold(extra, span, tile.values);
      typename Op::Stat stat = block_reduce<Op>(mine, slots);
      if (cluster_size > 1) stat = cluster_reduce<Op>(stat, &cluster_slot);
      const typename Op::Params p = Op::finalize(extra, span, stat);
      tile.template store<Op>(args.out + row * args.out_stride, nullptr, cols, me, step, Op::local(p, mine), extra);
    }
  }

  if (!want_params) return;
  Acc* dw_row = partial + group * cols;
  Acc* db_row = partial + (groups + group) * cols;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e0 = (me + k * step) * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if (e0 + e >= cols) continue;
      dw_row[e0 + e] = dw[k * VEC + e];
      if constexpr (kLayer) db_row[e0 + e] = db[k * VEC + e];
    }
  }
}

}  // namespace reducekit::kernels
