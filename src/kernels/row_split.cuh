// SPDX-License-Identifier: Apache-2.0
// Split rows: rows longer than a cluster's registers, cut into chunks that CTAs of one
// cooperative grid handle at the same time, so each element is read from memory once and the
// grid's loads, reductions and writes overlap (row_stream_kernel reads a row twice and leaves
// most SMs idle while 16-CTA clusters wait for each other).
//
// Work items: chunk j of row r is item i = r * C + j (C chunks a row, a function of the row
// length and dtype only). CTA b takes items b, b + G, b + 2G, ... (G = gridDim.x) and for each:
//
//   1. its chunk is already in one of `ring` shared-memory buffers (cp.async, issued ring - 1
//      items ahead), as the stream kernel's parked tiles: thread t owns the same slots of every
//      tile, so no barrier guards the buffers;
//   2. folds the chunk's tiles (Op::fold, Op::merge) and reduces them over the CTA (block_butterfly_reduce);
//   3. thread 0 stores that statistic at partials[r][j], then arrives on the row's counter
//      (__threadfence, atomicAdd: the release), and waits, with acquire loads and a growing
//      __nanosleep, until all C chunks of the row have arrived;
//   4. warp 0 merges partials[r][0 .. C) in a fixed order (lane l folds l, l + 32, ...; then a
//      butterfly of commutative merges), the same in every CTA of the row and for any row
//      count, so the results are deterministic and batch-invariant;
//   5. writes the chunk's output from the buffer, folding each tile again (same bits) for the
//      op's per-tile factors (Op::local), as row_stream_kernel does.
//
// Deadlock freedom. Every CTA of the grid is resident (cooperative launch) and C <= G (the
// planner and launcher check). Claim: every item is eventually published (step 3's store and
// arrival). Item i is published once its CTA has finished item i - G (or at once if i < G).
// Item i - G waits only for the items of its own row, which all lie below
// (row start) + C <= (i - G) + C <= i; so, by induction on i, they are all published and item
// i - G finishes. A CTA therefore never waits for a chunk whose CTA cannot reach it.
//
// Counters without a per-call memset: each CTA of a row adds 1 when it publishes (arrival)
// and 1 more once it has read the row's partials (departure). Waiters compare with C, which the
// count never drops below before the reset; the CTA that makes it 2C -- the last to leave --
// stores 0, after which no CTA of this launch touches that counter again. So a zeroed counter
// buffer stays zero between launches (the reduce family's tickets work the same way).
//
// Why the chunk stays on chip instead of being re-read from L2 after the row's statistic is
// known: the chunks in flight between their read and their write are G x (ring x chunk) bytes,
// 132 x 192 KB = 25 MB with the default plan, about half of the H200's 50 MB L2, which the
// output writes also pass through; a re-read would have to hit in L2 every time to keep DRAM
// traffic at one read, and the far L2 partition costs bandwidth of its own. Shared memory holds
// them for certain, and its bandwidth (a read and a re-read a chunk) is far above DRAM's.
//
// Rows whose chunks the resident CTAs' shared memory cannot hold (RowSplitConfig::reread: ring
// 0, no buffers) run the same protocol with each chunk read from global memory twice: folded
// under an evict_last policy, then, once the row's statistic is known, read again (evict_first)
// to be written. Their chunks are sized so a row has at most one chunk a resident CTA (the launch
// bounds promise kRereadSplitCtasPerSm CTAs an SM), so the deadlock argument above holds.
#pragma once

#include <cuda_pipeline.h>

#include <cstdint>

#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

// Workspace of a split launch, laid out by row_split_workspace (row_kernel_plan.hpp).
struct RowSplitArgs {
  unsigned* counters;  // [rows], zero on entry, zero again on exit
  void* partials;      // [rows][chunks] Op::Stat
  int chunks;          // C, <= gridDim.x
  int chunk_tiles;     // tiles a chunk
  int ring;            // chunk buffers a CTA, 2 .. 4 (0 in re-read splits)
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// cp.async.wait_group takes an immediate: at most `pending` groups may still be in flight.
__device__ __forceinline__ void wait_pending_groups(int pending) {
  switch (pending) {
    case 0: __pipeline_wait_prior(0); break;
    case 1: __pipeline_wait_prior(1); break;
    case 2: __pipeline_wait_prior(2); break;
    default: __pipeline_wait_prior(3); break;
  }
}

// Publishes a chunk's statistic (thread 0's `mine`): stores it among the row's partials and
// arrives on the row's counter (the release).
template <class Op>
__device__ __forceinline__ void publish_chunk(const typename Op::Stat& mine, typename Op::Stat* parts, int chunk,
                                              unsigned* counter) {
  if (threadIdx.x == 0) {
    store_partial(parts + chunk, mine);
    __threadfence();  // the statistic is visible device-wide before the arrival says so
    atomicAdd(counter, 1u);
  }
}

// Waits for all of a row's chunks to be published and returns the row's statistic to every
// thread of the CTA. `merged` is a shared slot.
template <class Op>
__device__ __forceinline__ typename Op::Stat meet_row(const typename Op::Stat* parts, int chunks, unsigned* counter,
                                                      typename Op::Stat* merged) {
  using Stat = typename Op::Stat;
  if (threadIdx.x == 0) {
    unsigned pause = 32;
    while (load_acquire(counter) < static_cast<unsigned>(chunks)) {
      __nanosleep(pause);
      pause = min(pause * 2, 256u);
    }
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    Stat s = Op::identity();
    for (int j = threadIdx.x; j < chunks; j += 32) s = Op::merge(s, load_partial(parts + j));  // at L2
    s = lane_butterfly_reduce<Op, 32>(s);
    if (threadIdx.x == 0) {
      *merged = s;
      // Departure: the last of the row's 2C additions resets the counter for the next launch.
      if (atomicAdd(counter, 1u) == 2u * chunks - 1) atomicExch(counter, 0u);
    }
  }
  __syncthreads();
  return *merged;
}

// A split item, chunk `chunk` of row `row`, in two halves: fold_chunk folds the chunk's tiles,
// reduces them over the CTA and publishes the result; write_chunk, given the row's statistic
// (meet_row), writes the chunk, folding each tile again (same bits) for the op's per-tile
// factors. each_tile(second_pass, visit) calls visit(tile, t) for the chunk's tiles t in order,
// from wherever the caller keeps them (shared memory, or global memory read twice).
template <typename T, class Op, bool kAligned, class Tile, class EachTile>
__device__ __forceinline__ void fold_chunk(const typename Op::Extra& extra, const RowSplitArgs& split, int64_t row,
                                           int chunk, int first, int tile_vectors, typename Op::Stat* slots,
                                           int cols, EachTile each_tile) {
  using Stat = typename Op::Stat;
  const int threads = blockDim.x;
  Stat mine = Op::identity();
  each_tile(false, [&](Tile& tile, int t) {
    mine = Op::merge(mine, fold_tile<Op, kAligned>(extra, row, first + t * tile_vectors, threads, cols, tile.values));
  });
  mine = block_butterfly_reduce<Op>(mine, slots);
  publish_chunk<Op>(mine, static_cast<Stat*>(split.partials) + row * split.chunks, chunk, split.counters + row);
}

template <typename T, class Op, bool kAligned, class Tile, class EachTile>
__device__ __forceinline__ void write_chunk(const RowArgs<T, Op::kInputs>& args, const typename Op::Extra& extra,
                                            const RowSplitArgs& split, int64_t row, int chunk, int first,
                                            int tile_vectors, typename Op::Stat* merged_slot, EachTile each_tile) {
  using Stat = typename Op::Stat;
  const int threads = blockDim.x, cols = args.cols;
  const Stat stat = meet_row<Op>(static_cast<const Stat*>(split.partials) + row * split.chunks, split.chunks,
                                 split.counters + row, merged_slot);
  const typename Op::Params p =
      finalize_row<Op, kAligned>(extra, row, first, threads, cols, stat, chunk == 0 && threadIdx.x == 0);
  T* out = args.out + row * args.out_stride;
  T* out2 = nullptr;
  if constexpr (Op::kOutputs == 2) out2 = Op::second_row(extra, row);
  each_tile(true, [&](Tile& tile, int t) {
    const int tile_first = first + t * tile_vectors;
    const Stat again = fold_tile<Op, kAligned>(extra, row, tile_first, threads, cols, tile.values);
    tile.template store<Op>(out, out2, cols, tile_first, threads, Op::local(p, again), extra);
  });
}

// The split kernels' work: Op is an extended row op (PlainRowOp<...> for the plain ones), `extra`
// its per-call arguments (weights, per-row statistics' outputs, a second output). The row's
// statistics are recorded once, by chunk 0's CTA.
template <typename T, class Op, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void row_split_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                               RowSplitArgs split, typename Op::Stat* slots,
                                               typename Op::Stat* merged_slot) {
  constexpr int NIN = Op::kInputs;
  using Tile = RowTile<T, NIN, VEC, VPT, kAligned>;
  extern __shared__ __align__(16) unsigned char split_bytes[];
  auto* buffers = reinterpret_cast<typename Tile::PackT*>(split_bytes);

  const int threads = blockDim.x, me = threadIdx.x;
  const int cols = args.cols, chunks = split.chunks, ring = split.ring;
  const int tile_vectors = VPT * threads;
  const int chunk_vectors = tile_vectors * split.chunk_tiles;
  const int tile_packs = NIN * VPT * threads;  // a tile's slots in a buffer
  const int buffer_packs = tile_packs * split.chunk_tiles;
  const int64_t items = args.rows * chunks;
  const int64_t stride = gridDim.x;

  // One cp.async group per item, empty past the last, so wait_pending_groups counts right.
  auto fetch = [&](int64_t item, int buffer) {
    if (item < items) {
      const int64_t row = item / chunks;
      const int first = static_cast<int>(item - row * chunks) * chunk_vectors + me;
      const T* in[NIN];
#pragma unroll
      for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
      for (int t = 0; t < split.chunk_tiles; ++t)
        Tile::prefetch(in, cols, first + t * tile_vectors, threads, buffers + buffer * buffer_packs + t * tile_packs,
                       me, threads);
    }
    __pipeline_commit();
  };

  int64_t item = blockIdx.x;
  for (int k = 0; k < ring - 1; ++k) fetch(item + k * stride, k);
  for (int buffer = 0; item < items; item += stride, buffer = buffer + 1 == ring ? 0 : buffer + 1) {
    // The buffer the previous item used is free again (this thread read its own slots of it).
    fetch(item + (ring - 1) * stride, buffer == 0 ? ring - 1 : buffer - 1);
    wait_pending_groups(ring - 1);  // this item's chunk is in

    const int64_t row = item / chunks;
    const int chunk = static_cast<int>(item - row * chunks);
    const int first = chunk * chunk_vectors + me;
    const typename Tile::PackT* chunk_buffer = buffers + buffer * buffer_packs;
    Tile tile;
    const auto each_tile = [&](bool, auto visit) {
      for (int t = 0; t < split.chunk_tiles; ++t) {
        tile.template unstash<Op>(chunk_buffer + t * tile_packs, cols, first + t * tile_vectors, threads, me, threads);
        visit(tile, t);
      }
    };
    fold_chunk<T, Op, kAligned, Tile>(extra, split, row, chunk, first, tile_vectors, slots, cols, each_tile);
    write_chunk<T, Op, kAligned, Tile>(args, extra, split, row, chunk, first, tile_vectors, merged_slot, each_tile);
  }
}

// Split rows re-read (RowSplitConfig::reread, ring 0): the same items, statistics and combine order as
// row_split_body, each chunk's tiles loaded from global memory in both passes.
template <typename T, class Op, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void row_split_reread_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                                      RowSplitArgs split, typename Op::Stat* slots,
                                                      typename Op::Stat* merged_slot) {
  constexpr int NIN = Op::kInputs;
  using Tile = RowTile<T, NIN, VEC, VPT, kAligned>;
  const int threads = blockDim.x, me = threadIdx.x;
  const int cols = args.cols, chunks = split.chunks;
  const int tile_vectors = VPT * threads;
  const int chunk_vectors = tile_vectors * split.chunk_tiles;
  const int row_vectors = (cols + VEC - 1) / VEC;
  const int64_t items = args.rows * chunks;
  const PolicyLoad16 keep{l2_policy(L2Keep::kLast)}, drop{l2_policy(L2Keep::kFirst)};
  // Item `item`'s chunk, its tiles t = 0 .. tiles - 1 in order, one in flight a thread (tiles of
  // 16 words, two CTAs an SM: reread_split_vpt); the fold keeps the chunk in L2, the write lets it
  // go.
  const auto each_tile_of = [&](int64_t item) {
    return [&, item](bool second_pass, auto visit) {
      const int64_t row = item / chunks;
      const int chunk = static_cast<int>(item - row * chunks);
      const int first = chunk * chunk_vectors + me;
      // The last chunk's tiles past the row's end hold nothing: skipped (the same for every thread).
      const int left = row_vectors - chunk * chunk_vectors;
      const int tiles = min(split.chunk_tiles, (left + tile_vectors - 1) / tile_vectors);
      const T* in[NIN];
#pragma unroll
      for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
      const PolicyLoad16 load16 = second_pass ? drop : keep;
      Tile tile;
      for (int t = 0; t < tiles; ++t) {
        tile.template load<Op>(in, cols, first + t * tile_vectors, threads, load16);
        visit(tile, t);
      }
    };
  };

  // One item ahead: item i + G is folded and published before item i waits for its row and is
  // written, so a CTA's wait overlaps its next read instead of idling the SM. Item i is then
  // published once its CTA has written item i - 2G, whose row's chunks all lie below
  // (i - 2G) + C <= i: the deadlock argument above holds with room to spare.
  int64_t pending = -1;  // folded and published, not yet written
  for (int64_t item = blockIdx.x;; item += gridDim.x) {
    if (item < items) {
      const int64_t row = item / chunks;
      const int chunk = static_cast<int>(item - row * chunks);
      fold_chunk<T, Op, kAligned, Tile>(extra, split, row, chunk, chunk * chunk_vectors + me, tile_vectors, slots,
                                        cols, each_tile_of(item));
    }
    if (pending >= 0) {
      const int64_t row = pending / chunks;
      const int chunk = static_cast<int>(pending - row * chunks);
      write_chunk<T, Op, kAligned, Tile>(args, extra, split, row, chunk, chunk * chunk_vectors + me, tile_vectors,
                                         merged_slot, each_tile_of(pending));
    }
    if (item >= items) break;
    pending = item;
  }
}

// The split kernels: chunks held in shared memory (row_split_body) or, kReread, read twice
// (row_split_reread_body); apart, so neither form's registers grow by the other's.
template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kReread>
__device__ __forceinline__ void row_split_items(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                                RowSplitArgs split) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat merged;
  if constexpr (kReread) row_split_reread_body<T, Op, VEC, VPT, kAligned>(args, extra, split, slots, &merged);
  else row_split_body<T, Op, VEC, VPT, kAligned>(args, extra, split, slots, &merged);
}

template <typename T, class PlainOp, int VEC, int VPT, bool kAligned, bool kReread>
__global__ void __launch_bounds__(kRowSplitThreads, kReread ? kRereadSplitCtasPerSm : 1)
row_split_kernel(RowArgs<T, PlainOp::kInputs> args, RowSplitArgs split) {
  row_split_items<T, PlainRowOp<PlainOp>, VEC, VPT, kAligned, kReread>(args, NoRowExtra{}, split);
}

template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kReread>
__global__ void __launch_bounds__(kRowSplitThreads, kReread ? kRereadSplitCtasPerSm : 1)
row_split_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra, RowSplitArgs split) {
  row_split_items<T, Op, VEC, VPT, kAligned, kReread>(args, extra, split);
}

}  // namespace reducekit::kernels
