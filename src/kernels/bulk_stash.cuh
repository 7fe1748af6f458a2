// SPDX-License-Identifier: Apache-2.0
// Tiles of a row parked in shared memory by bulk copies (cp.async.bulk, sm_90's copy engine), at
// any row alignment: one thread starts a few large copies a tile, every tile of the row is in
// flight at once, and each tile arrives on its own mbarrier, so the fold starts with the first.
//
// A tile slot is `threads` consecutive vectors from vector a; they touch granules a .. a + threads
// (the last only when the row starts off a 16-byte boundary), and the slot's buffer mirrors those
// granules, so a thread's vector is its own granule, or its granule and the next funnel-shifted
// (vector_io.cuh). Only granules wholly inside the row are copied; a vector that reaches into the
// row's partial first or last granule is read element by element from global memory instead
// (RowTile::load_elements), so nothing outside the row is read. The thread-to-element layout is
// the register tiles' own, so a row's results keep their bits.
//
//   tile t, input i, slot k:  | granule a | granule a+1 | ... | granule a+threads |  (threads+1) x 16 B
#pragma once

#include <cuda/ptx>

#include <cstdint>

#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

__device__ __forceinline__ int bulk_slot_granules(int threads) { return threads + 1; }

// The whole granules of a slot of vectors from `a` in a row of `cols` elements that starts `s`
// elements past a granule boundary: [lo, lo + count).
template <int VEC>
__device__ __forceinline__ void bulk_slot_span(int a, int threads, int cols, int s, int& lo, int& count) {
  const int first_whole = s > 0 ? 1 : 0;       // granule 0 holds bytes before the row
  const int last_whole = (cols + s) / VEC - 1;  // the last granule that ends inside the row
  lo = max(a, first_whole);
  const int hi = min(a + threads - 1 + (s > 0 ? 1 : 0), last_whole);
  count = max(hi - lo + 1, 0);
}

template <typename T, bool kAligned> __device__ __forceinline__ int shift_elems(const T* row) {
  return kAligned ? 0 : misalignment16(row) / static_cast<int>(sizeof(T));
}

// Thread 0 alone: starts the copies of tiles 0 .. tiles-1 of this CTA's share of a row (tile t's
// slot k covers the `threads` vectors from cta_first + t * tile_vectors + k * step) into
// `buffer`, tile t completing on full[t].
template <typename T, int NIN, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void start_bulk_tiles(const T* const (&row)[NIN], int cols, int cta_first, int step,
                                                 int tile_vectors, int tiles, int threads, Bytes16* buffer,
                                                 uint64_t* full) {
  int s[NIN];
#pragma unroll
  for (int i = 0; i < NIN; ++i) s[i] = shift_elems<T, kAligned>(row[i]);
  for (int t = 0; t < tiles; ++t) {
    const int tile_first = cta_first + t * tile_vectors;
    uint32_t bytes = 0;
#pragma unroll
    for (int i = 0; i < NIN; ++i)
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        int lo, count;
        bulk_slot_span<VEC>(tile_first + k * step, threads, cols, s[i], lo, count);
        bytes += 16u * count;
      }
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                         &full[t], bytes);
#pragma unroll
    for (int i = 0; i < NIN; ++i)
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int a = tile_first + k * step;
        int lo, count;
        bulk_slot_span<VEC>(a, threads, cols, s[i], lo, count);
        if (count == 0) continue;
        const char* src = reinterpret_cast<const char*>(row[i]) + (int64_t(lo) * VEC - s[i]) * int64_t(sizeof(T));
        Bytes16* dst = buffer + ((t * NIN + i) * VPT + k) * bulk_slot_granules(threads) + (lo - a);
        cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, src, 16u * count, &full[t]);
      }
  }
}

// Every thread: its share of tile t (`first`: the thread's first vector of the tile) from the
// tile's buffer, the row's end vectors from global memory.
template <class Op, typename T, int NIN, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void load_bulk_tile(RowTile<T, NIN, VEC, VPT, kAligned>& tile, const Bytes16* buffer,
                                               const T* const (&row)[NIN], int cols, int first, int step,
                                               int threads) {
  using PackT = typename RowTile<T, NIN, VEC, VPT, kAligned>::PackT;
#pragma unroll
  for (int i = 0; i < NIN; ++i) {
    const int s = shift_elems<T, kAligned>(row[i]);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (first + k * step) * VEC;
      const Bytes16* g = buffer + (i * VPT + k) * bulk_slot_granules(threads) + threadIdx.x;
      if (s == 0 && e0 + VEC <= cols)
        tile.unpack(i, k, pack_of<PackT>(load_aligned16(g)));
      else if (s != 0 && e0 >= VEC && e0 + 2 * VEC - s <= cols)
        tile.unpack(i, k, pack_of<PackT>(funnel16(load_aligned16(g), load_aligned16(g + 1), s * int(sizeof(T)))));
      else
        tile.template load_elements<Op>(i, k, row[i], e0, cols);
    }
  }
}

__device__ __forceinline__ void wait_bulk_tile(uint64_t* full, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(full, parity)) {
  }
}

}  // namespace reducekit::kernels
