// SPDX-License-Identifier: Apache-2.0
// The row engine's stream kernels (row_engine.cuh describes the engine): rows longer than a CTA's
// (or cluster's) register tile, each thread streaming through several tiles, the first ones
// parked in shared memory, the statistics merged online, then a second pass that folds each tile
// again and writes it. Held rows (the largest tiles, clusters of 8-16) park what fits on chip;
// re-read rows (small tiles, one CTA, row_kernel_plan.hpp) park up to their plan's stash by bulk
// copies and read the rest again through L2.
#pragma once

#include <cuda/ptx>

#include <cstdint>
#include <type_traits>

#include "kernels/bulk_stash.cuh"
#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

// Stream kernels of re-read rows' small tiles (kRereadTileWords, row_kernel_plan.hpp) are held
// to two 512-thread CTAs an SM (64 registers): their point is several rows' reductions
// overlapping on an SM, and left free ptxas gave layer_norm's float32 kernel 86 registers, one
// CTA an SM. Small tiles (kRereadSmallTileWords: one vector, 4-8 words) are held to four (32
// registers), as torch.compile's norm kernels run, or three (40) for 16-bit data, whose tile
// converted to float32 spilled at 32 (three gained for 16-bit layer_norm; float32 lost at three).
// Counted in accumulator words a thread; the largest tiles keep no bound (0 leaves it out).
template <int kWords, int kElemBytes>
constexpr int kStreamMinCtas = kWords <= 8 ? (kElemBytes == 2 ? 3 : 4) : kWords <= 16 ? 2 : 0;
template <typename T, class Op, int VEC, int VPT>
constexpr int kStreamTileWords = VEC * VPT * Op::kInputs * int(sizeof(acc_t<T>) / sizeof(float));

// Ops whose second output is the one value their statistics and outputs come from
// (Op::kReadsBackSecond, the fused residual norms): a streamed row's second pass reads that
// output back instead of the op's inputs.
template <class Op, class = void> struct ReadsBackSecond : std::false_type {};
template <class Op>
struct ReadsBackSecond<Op, std::void_t<decltype(Op::kReadsBackSecond)>> : std::bool_constant<Op::kReadsBackSecond> {};

// Ops whose streamed rows reduce sums of deviations from a shift (Op::kShiftedStream: layer_norm,
// norm_ops.cuh) instead of merging the op's statistic tile by tile.
template <class Op, class = void> struct ShiftedStream : std::false_type {
  using Stat = typename Op::Stat;  // the type of the kernel's sums, never used for these ops
};
template <class Op>
struct ShiftedStream<Op, std::void_t<decltype(Op::kShiftedStream)>> : std::bool_constant<Op::kShiftedStream> {
  using Stat = typename Op::Shifted::Stat;
};

// Writes Op's second output alone (RowTile::store of the first pass).
template <class Op> struct SecondOutputOf {
  using Acc = typename Op::Acc;
  using Extra = typename Op::Extra;
  struct Column {};
  static constexpr int kInputs = Op::kInputs;
  static constexpr int kOutputs = 1;
  template <int VEC, bool kAligned> __device__ __forceinline__ static void columns(const Extra&, int, int, Column (&)[VEC]) {}
  template <class Local> __device__ __forceinline__ static Acc output(const Acc (&v)[kInputs], const Local&, const Column&) {
    return Op::second(v);
  }
};

// Writes Op's first output alone (the second pass, once the first has written the second output).
template <class Op> struct FirstOutputOf : Op {
  static constexpr int kOutputs = 1;
};

// Op's first output from its second one, read back as the only input (the second pass).
template <class Op> struct OutputFromSecondOf {
  using Acc = typename Op::Acc;
  using Extra = typename Op::Extra;
  using Column = typename Op::Column;
  static constexpr int kInputs = 1;
  static constexpr int kOutputs = 1;
  __device__ static Acc pad(int) { return Op::pad(0); }
  template <int VEC, bool kAligned>
  __device__ __forceinline__ static void columns(const Extra& x, int e0, int cols, Column (&c)[VEC]) {
    Op::template columns<VEC, kAligned>(x, e0, cols, c);
  }
  template <class Local> __device__ __forceinline__ static Acc output(const Acc (&v)[1], const Local& l, const Column& c) {
    Acc all[Op::kInputs] = {};
    all[0] = v[0];
    return Op::output(all, l, c);
  }
};

// Rows longer than a cluster's registers: each thread streams through `tiles` tiles, the
// statistics merged online (see row_engine.cuh). kBulkStash: the parked tiles arrive by bulk
// copies (bulk_stash.cuh: any row alignment, each tile on its own mbarrier, at most
// kMaxBulkStashTiles); otherwise by each thread's cp.async of its own vectors (aligned rows; a
// shifted row's are loaded and stored, a synchronous copy).
template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kBulkStash>
__device__ __forceinline__ void row_stream_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                                typename Op::Stat* slots, typename Op::Stat* cluster_sets, int tiles,
                                                int stash_tiles) {
  constexpr int NIN = Op::kInputs;
  using Tile = RowTile<T, NIN, VEC, VPT, kAligned>;
  using Acc = typename Op::Acc;
  // Re-read rows only: the held rows' large tiles spilled with the shift's state (ptxas).
  constexpr bool kShifted = ShiftedStream<Op>::value && kBulkStash;
  // Tiles a group of loads ahead covers (RowArgs::loads_ahead): four vectors a thread of one
  // float32 input, two of one 16-bit input (its one-vector kernel spills as much with two as with
  // none at its 32 registers, five times as much with four, ptxas); two-input rows none.
  constexpr int kAhead = NIN != 1 ? 1 : sizeof(T) == 4 && VPT <= 2 ? 4 / VPT : sizeof(T) == 2 && VPT == 1 ? 2 : 1;
  constexpr int kAheadOut = kAhead / 2;
  static_assert(sizeof(typename ShiftedStream<Op>::Stat) <= sizeof(typename Op::Stat), "reduction slots too small");
  extern __shared__ __align__(128) unsigned char stash_bytes[];
  auto* stash = reinterpret_cast<typename Tile::PackT*>(stash_bytes);
  auto* bulk = reinterpret_cast<Bytes16*>(stash_bytes);
  __shared__ uint64_t tile_in[kBulkStash ? kMaxBulkStashTiles : 1];
  static_assert((33 + 2 * kClusterSetSlots) * sizeof(typename Op::Stat) + sizeof(tile_in) <= kRowKernelStaticSmemBytes,
                "the kernel's statics (its slots, cluster sets and mbarriers) outgrow the planner's reserve");

  const RowPlace at = row_place();
  const int cluster_size = at.cluster_size, step = at.step, me = at.me;
  if (cluster_size > 1) cluster_arrive_at_start();
  int set = 0;  // cluster_exchange_next's
  const int threads = blockDim.x;
  const int tile_vectors = VPT * step;
  const int stash_stride = NIN * VPT * threads;  // packs per stashed tile
  const int cols = args.cols;
  const int bulk_tile_granules = NIN * VPT * bulk_slot_granules(threads);
  auto unstash = [&](Tile& tile, int t, int first, const T* const (&in)[NIN]) {
    if constexpr (kBulkStash) load_bulk_tile<Op>(tile, bulk + t * bulk_tile_granules, in, cols, first, step, threads);
    else tile.template unstash<Op>(stash + t * stash_stride, cols, first, step, threadIdx.x, threads);
  };
  uint32_t parity = 0;  // of every tile's mbarrier: each completes once a row
  // Tiles neither parked nor last are read twice from global memory: the first read asks L2 to
  // keep them (evict_last), the second to let them go (evict_first), so that the second finds
  // them there while the other CTAs' rows stream past (RowArgs::l2_hints; off: normal reads).
  // A row whose second output is read back (RowArgs::read_back_second) reads its inputs once:
  // all of them as last reads. Re-read rows only (kBulkStash): in the held rows' large tiles the
  // extra store and tile spilled (ptxas), and those rows park most of their tiles anyway.
  constexpr bool kReadBack = ReadsBackSecond<Op>::value && kBulkStash;
  const bool read_back = kReadBack && args.read_back_second;
  // A shifted row's vectors share granules with their neighbours': its first pass writes all of
  // the second output, so that the second writes nothing its read-back loads touch.
  constexpr bool kSecondInFirstPass = kReadBack && !kAligned;
  const bool hinted = args.l2_hints && tiles - stash_tiles >= 2;
  const PolicyLoad16 keep{l2_policy(hinted && !read_back ? L2Keep::kLast : hinted ? L2Keep::kFirst : L2Keep::kNormal)};
  const PolicyLoad16 drop{l2_policy(hinted ? L2Keep::kFirst : L2Keep::kNormal)};
  if constexpr (kBulkStash) {
    if (threadIdx.x == 0) {
      for (int t = 0; t < stash_tiles; ++t) cuda::ptx::mbarrier_init(&tile_in[t], 1);
      cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
    }
  }

  if (cluster_size > 1) cluster_wait_started();
  for (int64_t row = at.first; row < args.rows; row += at.groups) {
    const T* in[NIN];
#pragma unroll
    for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
    T* out = args.out + row * args.out_stride;
    T* out2 = nullptr;
    if constexpr (Op::kOutputs == 2) out2 = Op::second_row(extra, row);

    // Tiles 0 .. stash_tiles-1 go to shared memory asynchronously, all in flight together,
    // and are folded first; the rest stream through registers, and the last stays there for
    // the output pass. One tile is live at a time, so tiles can use all the registers.
    typename Op::Stat stat = Op::identity(), last = Op::identity();
    Tile tile;
    // kShifted: the row's first tile gives the shift (its mean over the row's threads), then
    // every tile adds its sums of deviations from it.
    typename ShiftedStream<Op>::Stat sums{};
    Acc shift = Acc(0);
    auto take_shifted = [&](int t) {
      if constexpr (kShifted) {
        Op::prepare_values(tile.values);
        if (t == 0) {
          using Sum = RowSum<Acc>;
          typename Sum::Stat first{{Op::tile_sum(tile.values)}};
          first = block_butterfly_reduce<Sum>(first, reinterpret_cast<typename Sum::Stat*>(slots));
          if (cluster_size > 1) first = cluster_exchange_next<Sum>(first, cluster_sets, set);
          const int64_t counted = int64_t(tile_vectors) * VEC < cols ? int64_t(tile_vectors) * VEC : cols;
          shift = first.w[0] / Acc(counted);
        }
        sums = Op::Shifted::merge(
            sums, Op::fold_shifted(RowSpan{row, me + t * tile_vectors, step, cols, kAligned}, tile.values, shift));
      }
    };
    // Loads ahead: the whole tiles t0, t0 + dir, ... of a group as raw vectors, every load
    // issued before any is used; then each into the tile in turn. The row's last tile is read
    // once: its loads let L2 drop it.
    auto load_group = [&](auto& raw, int t0, int dir, const PolicyLoad16& load16) {
      constexpr int G = int(sizeof(raw) / sizeof(raw[0]));
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const PolicyLoad16& policy = t0 + dir * g == tiles - 1 ? drop : load16;
#pragma unroll
        for (int i = 0; i < NIN; ++i)
#pragma unroll
          for (int k = 0; k < VPT; ++k) raw[g][i][k] = policy(in[i] + (me + (t0 + dir * g) * tile_vectors + k * step) * VEC);
      }
    };
    auto unpack_raw = [&](const Bytes16 (&raw)[NIN][VPT]) {
#pragma unroll
      for (int i = 0; i < NIN; ++i)
#pragma unroll
        for (int k = 0; k < VPT; ++k) tile.unpack(i, k, pack_of<typename Tile::PackT>(raw[i][k]));
    };
    if (stash_tiles > 0) {
      if constexpr (kBulkStash) {
        __syncthreads();  // the barriers are set up, and the last row's output pass has left the stash
        if (threadIdx.x == 0)
          start_bulk_tiles<T, NIN, VEC, VPT, kAligned>(in, cols, me - static_cast<int>(threadIdx.x), step, tile_vectors,
                                                       stash_tiles, threads, bulk, tile_in);
      } else {
        for (int t = 0; t < stash_tiles; ++t)
          Tile::prefetch(in, cols, me + t * tile_vectors, step, stash + t * stash_stride, threadIdx.x, threads);
        __pipeline_commit();
        __pipeline_wait_prior(0);
      }
      for (int t = 0; t < stash_tiles; ++t) {
        if constexpr (kBulkStash) wait_bulk_tile(&tile_in[t], parity);
        unstash(tile, t, me + t * tile_vectors, in);
        if constexpr (kShifted) take_shifted(t);
        else stat = Op::merge(stat, fold_tile<Op, kAligned>(extra, row, me + t * tile_vectors, step, cols, tile.values));
        if constexpr (kSecondInFirstPass) {
          if (read_back) tile.template store<SecondOutputOf<Op>>(out2, nullptr, cols, me + t * tile_vectors, step, 0, extra);
        }
      }
      parity ^= 1;
    }
    int t = stash_tiles;
    // Loads ahead (RowArgs::loads_ahead): the tiles in groups of kAhead lying wholly inside the
    // row (the same for every thread), the group's loads all issued before its first fold; then
    // the same folds, in the same order, as one tile at a time. A group that ends the row leaves
    // the last tile in `tile`, as the loop below would.
    if constexpr (kShifted && kAligned && kAhead > 1) {
      if (args.loads_ahead >= 1) {
        for (; t + kAhead <= tiles && int64_t(t + kAhead) * tile_vectors * VEC <= cols; t += kAhead) {
          Bytes16 raw[kAhead][NIN][VPT];
          load_group(raw, t, 1, keep);
#pragma unroll
          for (int g = 0; g < kAhead; ++g) {
            unpack_raw(raw[g]);
            take_shifted(t + g);
          }
        }
      }
    }
    for (; t < tiles; ++t) {
      tile.template load<Op>(in, cols, me + t * tile_vectors, step, t == tiles - 1 ? drop : keep);
      if constexpr (kShifted) {
        take_shifted(t);
      } else {
        last = fold_tile<Op, kAligned>(extra, row, me + t * tile_vectors, step, cols, tile.values);
        stat = Op::merge(stat, last);
      }
      // fold left the second output's values in the tile; an aligned row's last tile writes them
      // in the output pass
      if constexpr (kReadBack) {
        if (read_back && (kSecondInFirstPass || t != tiles - 1))
          tile.template store<SecondOutputOf<Op>>(out2, nullptr, cols, me + t * tile_vectors, step, 0, extra);
      }
    }
    typename Op::Params p;
    if constexpr (kShifted) {
      using Pair = typename Op::Shifted;
      sums = block_butterfly_reduce<Pair>(sums, reinterpret_cast<typename Pair::Stat*>(slots));
      if (cluster_size > 1) sums = cluster_exchange_next<Pair>(sums, cluster_sets, set);
      const RowSpan span{row, me + (tiles - 1) * tile_vectors, step, cols, kAligned};
      p = Op::finalize_shifted(extra, span, shift, sums);
      if (me == 0) Op::row_done(extra, span, p);
    } else {
      stat = block_butterfly_reduce<Op>(stat, slots);
      if (cluster_size > 1) stat = cluster_exchange_next<Op>(stat, cluster_sets, set);
      p = finalize_row<Op, kAligned>(extra, row, me + (tiles - 1) * tile_vectors, step, cols, stat, me == 0);
    }
    // The factors of a tile's outputs from its own fold (the shifted rows' come from p alone).
    auto local_of = [&](const typename Op::Stat& own) {
      if constexpr (kShifted) return Op::local_two(p);
      else return Op::local(p, own);
    };

    // Last tile first: it is still in registers, folded. The others are fetched and folded
    // again (same inputs, same bits): from shared memory if parked, else from global memory.
    auto store_outputs = [&](const Tile& folded, int first, const auto& local) {
      if constexpr (kSecondInFirstPass) {
        if (read_back) return folded.template store<FirstOutputOf<Op>>(out, nullptr, cols, first, step, local, extra);
      }
      folded.template store<Op>(out, out2, cols, first, step, local, extra);
    };
    store_outputs(tile, me + (tiles - 1) * tile_vectors, local_of(last));
    int t_out = tiles - 2;
    // Loads ahead, level 2 (RowArgs::loads_ahead): the re-read tiles from global memory in groups
    // of kAheadOut (half the first pass's: weight and bias take registers beside them; four
    // spilled at 32, ptxas), every load of a group before its first output (every tile but the last is whole:
    // only the row's last vector can end inside a vector).
    if constexpr (kShifted && kAligned && kAheadOut > 1) {
      if (args.loads_ahead >= 2) {
        for (; t_out - (kAheadOut - 1) >= stash_tiles; t_out -= kAheadOut) {
          Bytes16 raw[kAheadOut][NIN][VPT];
          load_group(raw, t_out, -1, drop);
#pragma unroll
          for (int g = 0; g < kAheadOut; ++g) {
            unpack_raw(raw[g]);
            Op::prepare_values(tile.values);
            store_outputs(tile, me + (t_out - g) * tile_vectors, local_of(last));
          }
        }
      }
    }
    // Whole tiles of an aligned one-input row, re-read from global memory, as the loop below
    // takes them but without its bounds checks, the parameter cases decided once a row
    // (Op::with_whole_columns): the same loads, arithmetic and stores.
    if constexpr (kShifted && kAligned && NIN == 1) {
      Op::with_whole_columns(extra, [&](const auto& columns) {
        for (; t_out >= stash_tiles; --t_out) {
          const int first = me + t_out * tile_vectors;
#pragma unroll
          for (int k = 0; k < VPT; ++k) tile.unpack(0, k, pack_of<typename Tile::PackT>(drop(in[0] + (first + k * step) * VEC)));
          Op::prepare_values(tile.values);
          tile.template store_whole<Op>(out, nullptr, first, step, local_of(last), columns);
        }
      });
    }
    for (int t = t_out; t >= 0; --t) {
      const int first = me + t * tile_vectors;
      if constexpr (kReadBack) {
        if (read_back && t >= stash_tiles) {
          RowTile<T, 1, VEC, VPT, kAligned> second;
          const T* const second_row[1] = {out2};
          second.template load<OutputFromSecondOf<Op>>(second_row, cols, first, step, drop);
          second.template store<OutputFromSecondOf<Op>>(out, nullptr, cols, first, step, local_of(last), extra);
          continue;
        }
      }
      if (t < stash_tiles) unstash(tile, t, first, in);
      else tile.template load<Op>(in, cols, first, step, drop);
      if constexpr (kShifted) {
        Op::prepare_values(tile.values);
        store_outputs(tile, first, local_of(last));
      } else {
        const typename Op::Stat again = fold_tile<Op, kAligned>(extra, row, first, step, cols, tile.values);
        store_outputs(tile, first, local_of(again));
      }
    }
  }
}

template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kBulkStash>
__global__ void __launch_bounds__(kMaxBlockThreads, kStreamMinCtas<kStreamTileWords<T, Op, VEC, VPT>, int(sizeof(T))>)
row_stream_kernel(RowArgs<T, Op::kInputs> args, int tiles, int stash_tiles) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_sets[2 * kClusterSetSlots];
  row_stream_body<T, PlainRowOp<Op>, VEC, VPT, kAligned, kBulkStash>(args, NoRowExtra{}, slots, cluster_sets, tiles, stash_tiles);
}

template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kBulkStash>
__global__ void __launch_bounds__(kMaxBlockThreads, kStreamMinCtas<kStreamTileWords<T, Op, VEC, VPT>, int(sizeof(T))>)
row_stream_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra, int tiles, int stash_tiles) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_sets[2 * kClusterSetSlots];
  row_stream_body<T, Op, VEC, VPT, kAligned, kBulkStash>(args, extra, slots, cluster_sets, tiles, stash_tiles);
}

}  // namespace reducekit::kernels
