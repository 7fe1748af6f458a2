// SPDX-License-Identifier: Apache-2.0
// Staged rows: the row engine's one-tile rows (one CTA, or a cluster of CTAs, a row), with each
// CTA's share of the next rows copied into shared memory by bulk copies (cp.async.bulk, the
// copy engine of sm_90) while the current row is reduced and written from registers. The
// planner stages 16-bit softmax / log_softmax rows held by clusters of 5 CTAs and more
// (staged_min_cluster_for in row_kernel_plan.cpp); the launcher instantiates these kernels for
// 16-bit one-input plain ops only.
//
// CTAs (clusters) stay resident and loop over rows b, b + G, ...; a CTA keeps `stages` buffers
// (1 or 2), each holding one row's share. Thread 0 starts a row's copies (a handful of large
// ones, one per tile slot and input) and the row arrives on the buffer's mbarrier; every thread
// then moves its vectors into registers, the buffer takes the row `stages` rows ahead, and the
// row is folded, reduced and stored exactly as row_block_kernel does (same tile, same thread-to-
// element layout, same combine order), so both give the same bits for a row.
//
// Alignment is per row. A slot of `threads` vectors from vector a touches granules a .. a +
// threads (the last only when the row starts off a 16-byte boundary); the buffer mirrors them,
// so a thread's vector is its granule, or its granule and the next funnel-shifted. Only granules
// wholly inside the row are copied; the vectors that reach into the row's partial first or last
// granule are read element by element from global memory (RowTile::load_elements), so nothing
// outside the row is read.
//
//   slot k of input i:  | granule a | granule a+1 | ... | granule a+threads |   (threads + 1) x 16 B
#pragma once

#include <cuda/ptx>

#include <cstdint>

#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

// Granules a staged buffer holds per tile slot and input (see above).
__device__ __forceinline__ int staged_slot_granules(int threads) { return threads + 1; }

// The whole granules of slot `k` of input `i` (vectors from `a`) that lie inside a row of `cols`
// elements starting `s` elements past a granule boundary: [lo, lo + count).
template <int VEC>
__device__ __forceinline__ void staged_span(int a, int threads, int cols, int s, int& lo, int& count) {
  const int first_whole = s > 0 ? 1 : 0;       // granule 0 holds bytes before the row
  const int last_whole = (cols + s) / VEC - 1;  // the last granule that ends inside the row
  lo = max(a, first_whole);
  const int hi = min(a + threads - 1 + (s > 0 ? 1 : 0), last_whole);
  count = max(hi - lo + 1, 0);
}

// Thread 0 alone: starts the copies of this CTA's share of one row (slots from vector
// `cta_first`, `step` vectors apart) into `buffer`, completing on `full`.
template <typename T, int NIN, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void start_staged_row(const T* const (&row)[NIN], int cols, int cta_first, int step,
                                                 int threads, Bytes16* buffer, uint64_t* full) {
  int shift[NIN];
#pragma unroll
  for (int i = 0; i < NIN; ++i) shift[i] = kAligned ? 0 : misalignment16(row[i]) / static_cast<int>(sizeof(T));
  uint32_t bytes = 0;
#pragma unroll
  for (int i = 0; i < NIN; ++i)
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      int lo, count;
      staged_span<VEC>(cta_first + k * step, threads, cols, shift[i], lo, count);
      bytes += 16u * count;
    }
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, full,
                                       bytes);
#pragma unroll
  for (int i = 0; i < NIN; ++i)
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int a = cta_first + k * step;
      int lo, count;
      staged_span<VEC>(a, threads, cols, shift[i], lo, count);
      if (count == 0) continue;
      const char* src = reinterpret_cast<const char*>(row[i]) + (int64_t(lo) * VEC - shift[i]) * int64_t(sizeof(T));
      Bytes16* dst = buffer + (i * VPT + k) * staged_slot_granules(threads) + (lo - a);
      cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, src, 16u * count, full);
    }
}

// Every thread: its tile from a filled buffer (slot k's vector is the thread's granule of the
// slot, and the next one for a shifted row), the row's end vectors from global memory.
template <class Op, typename T, int NIN, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void load_staged_tile(RowTile<T, NIN, VEC, VPT, kAligned>& tile, const Bytes16* buffer,
                                                 const T* const (&row)[NIN], int cols, int first, int step,
                                                 int threads) {
  using PackT = typename RowTile<T, NIN, VEC, VPT, kAligned>::PackT;
#pragma unroll
  for (int i = 0; i < NIN; ++i) {
    const int s = kAligned ? 0 : misalignment16(row[i]) / static_cast<int>(sizeof(T));
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (first + k * step) * VEC;
      const Bytes16* g = buffer + (i * VPT + k) * staged_slot_granules(threads) + threadIdx.x;
      if (s == 0 && e0 + VEC <= cols)
        tile.unpack(i, k, pack_of<PackT>(load_aligned16(g)));
      else if (s != 0 && e0 >= VEC && e0 + 2 * VEC - s <= cols)
        tile.unpack(i, k, pack_of<PackT>(funnel16(load_aligned16(g), load_aligned16(g + 1), s * int(sizeof(T)))));
      else
        tile.template load_elements<Op>(i, k, row[i], e0, cols);
    }
  }
}

// Op: a policy of the extended interface (plain ops arrive wrapped in PlainRowOp).
template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kCluster>
__device__ __forceinline__ void row_staged_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                                typename Op::Stat* slots, typename Op::Stat* cluster_slot,
                                                int stages) {
  constexpr int NIN = Op::kInputs;
  extern __shared__ __align__(128) unsigned char staged_bytes[];
  __shared__ uint64_t full[kMaxRowStages];
  Bytes16* buffers = reinterpret_cast<Bytes16*>(staged_bytes);

  const RowPlace at = row_place();
  const int threads = blockDim.x;
  const int cta_first = at.me - static_cast<int>(threadIdx.x);
  const int buffer_granules = NIN * VPT * staged_slot_granules(threads);
  const int cols = args.cols;
  auto row_of = [&](int64_t row, const T* (&in)[NIN]) {
#pragma unroll
    for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
  };
  auto start = [&](int64_t row, int b) {
    if (threadIdx.x != 0 || row >= args.rows) return;
    const T* in[NIN];
    row_of(row, in);
    start_staged_row<T, NIN, VEC, VPT, kAligned>(in, cols, cta_first, at.step, threads, buffers + b * buffer_granules,
                                                 &full[b]);
  };

  if (threadIdx.x == 0) {
    for (int b = 0; b < stages; ++b) cuda::ptx::mbarrier_init(&full[b], 1);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  __syncthreads();
  for (int b = 0; b < stages; ++b) start(at.first + b * at.groups, b);

  int b = 0;
  uint32_t parity = 0;
  for (int64_t row = at.first; row < args.rows; row += at.groups) {  // uniform over the row's CTAs
    const T* in[NIN];
    row_of(row, in);
    while (!cuda::ptx::mbarrier_try_wait_parity(&full[b], parity)) {
    }
    RowTile<T, NIN, VEC, VPT, kAligned> tile;
    load_staged_tile<Op>(tile, buffers + b * buffer_granules, in, cols, at.me, at.step, threads);
    __syncthreads();  // every thread holds its share: the buffer may take the next row
    start(row + int64_t(stages) * at.groups, b);
    if (++b == stages) b = 0, parity ^= 1;

    const auto local = one_tile_factors<Op, kAligned>(extra, row, at.me, at.step, cols, tile.values,
                                                      BlockGroup<Op, kCluster>{slots, cluster_slot, args.two_phase},
                                                      at.me == 0);
    T* out2 = nullptr;
    if constexpr (Op::kOutputs == 2) out2 = Op::second_row(extra, row);
    tile.template store<Op>(args.out + row * args.out_stride, out2, cols, at.me, at.step, local, extra);
  }
}

template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kCluster>
__global__ void __launch_bounds__(kMaxBlockThreads, 1) row_staged_kernel(RowArgs<T, Op::kInputs> args, int stages) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_slot;
  row_staged_body<T, PlainRowOp<Op>, VEC, VPT, kAligned, kCluster>(args, NoRowExtra{}, slots, &cluster_slot, stages);
}

}  // namespace reducekit::kernels
