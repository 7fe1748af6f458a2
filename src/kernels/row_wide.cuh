// SPDX-License-Identifier: Apache-2.0
// Wide rows (RowKernelKind::kWide, the norm forwards): one CTA of up to kWideRowThreads threads a
// row, at most kWideTileValues values a thread, the row loaded once with every register of the SM
// and no row loop. Built on the row engine's tiles and groups (row_engine.cuh).
#pragma once

#include <cstdint>

#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

// Ops that hold their inputs' sum (HoldsInputSum): each vector of x and the residual read (at
// the row's own alignment), summed and rounded as the op's prepare() does, s written as the
// second output and kept as a one-input tile; then the one-input op's passes, as row_block_body's.
// The sum is spelled out here and in row_wide_packed_body rather than through prepare(): its
// round trip back to Acc moved the 16-bit kernels' spills (ptxas).
template <typename T, class Op, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void row_wide_sum_body(const RowArgs<T, 2>& args, const typename Op::Extra& extra,
                                                  typename Op::Stat* slots) {
  using One = typename Op::OneInput;
  using Acc = acc_t<T>;
  const int me = threadIdx.x, step = blockDim.x;
  const int64_t row = blockIdx.x;  // the grid holds every row
  const T* const inputs[2] = {args.in[0] + row * args.in_stride[0], args.in[1] + row * args.in_stride[1]};
  T* const sum = Op::second_row(extra, row);
  // Every vector's loads before the first store of s: a store between them would order the
  // next vector's loads behind it (the pointers may alias), one memory round trip a vector.
  // A shifted row's vectors share granules between lanes (load_shifted, write_shifted): one
  // 16-byte load a vector of each input and one 16-byte store of s, not two and three pieces.
  Pack<T, VEC> s[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    RowTile<T, 2, VEC, 1, kAligned> pair;  // pads (0) past the row
    if constexpr (kAligned) pair.template load<Op>(inputs, args.cols, me + k * step, step);
    else pair.template load_shifted<Op>(inputs, args.cols, me + k * step, step, PlainLoad16{});
    Acc v[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = pair.values[0][e] + pair.values[1][e];
    s[k] = pack_from_acc<T>(v);
  }
  RowTile<T, 1, VEC, VPT, kAligned> tile;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    tile.unpack(0, k, s[k]);
    const int e0 = (me + k * step) * VEC;
    if constexpr (kAligned) {
      if (e0 < args.cols) RowTile<T, 1, VEC, 1, kAligned>::write(sum, e0, args.cols, s[k]);
    } else {
      const int width = step < 32 ? step : 32;  // the whole warp calls it
      RowTile<T, 1, VEC, 1, kAligned>::write_shifted(sum, e0, args.cols, s[k], (me + k * step) % width, width);
    }
  }
  const auto local = one_tile_factors<One, kAligned>(extra, row, me, step, args.cols, tile.values,
                                                     BlockGroup<One, false, true>{slots, args.two_phase},
                                                     me == 0);
  tile.template store_row<One>(args.out + row * args.out_stride, nullptr, args.cols, me, step, local, extra);
}

// Wide rows (RowKernelKind::kWide, planned for the norm forwards only): the block kernel's body on
// one CTA of up to kWideRowThreads threads a row, at most kWideTileValues values a thread, so that
// the row is loaded once with every register of the SM (64 a thread) and no row loop. Two-phase
// ops keep only their two-phase path: the merged one beside it cost registers (ptxas: spills) for
// a path no plan runs. Ops that hold their inputs' sum take row_wide_sum_body.
template <typename T, class Op, int VEC, int VPT, bool kAligned>
__global__ void __launch_bounds__(kWideRowThreads, 1)
row_wide_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra) {
  static_assert(VEC * VPT * (HoldsInputSum<Op>::value ? 1 : Op::kInputs) <= kWideTileValues,
                "wide tiles take one row a CTA, no loop");
  __shared__ typename Op::Stat slots[33];
  if constexpr (HoldsInputSum<Op>::value) row_wide_sum_body<T, Op, VEC, VPT, kAligned>(args, extra, slots);
  else row_block_body<T, Op, VEC, VPT, kAligned, false, true>(args, extra, slots, nullptr);
}

// Wide rows of 16-bit elements (and of float32 for two-phase ops), aligned rows of whole vectors
// only (the launcher checks; a vector cut by the row end, read element by element, spilled at
// these bounds): the tile crosses the row's reductions as its 16-bit packs, half the registers of
// its float32 values, and is widened again for each pass over it (two-phase ops: the mean's fold,
// the deviations' fold, the output); float32 packs are the values themselves.
// The same values and arithmetic as row_wide_kernel_ext: the same bits. The kernels below set
// the registers a thread, which bound the rows in flight an SM.
// kWhole: every vector of every thread lies inside the row (cols = threads x VPT x VEC), so
// loads, folds and stores skip their bounds and the parameters' cases are decided once
// (Op::with_whole_columns): the same values and arithmetic, the same bits.
// Ops that hold their inputs' sum (HoldsInputSum) load both inputs' packs, sum and round them as
// row_wide_sum_body does, write s and go on with Op::OneInput over it.
// A row of x off its granules (RowArgs::input_alone_shifted; rows of whole vectors): each lane
// loads the granule under its vector's start and takes the next from its right neighbour, the
// warp's last lane from lanes 0-3, which load a word each of the granule past the warp's last
// vector; one 16-byte load a vector, as aligned rows. Vectors past the row take `pads`. CTAs of
// whole warps (the launcher checks), every lane calling.
template <typename T, int VEC, int VPT>
__device__ __forceinline__ void load_shifted_packs(const T* in, int cols, int me, int step, const Bytes16& pads,
                                                   Bytes16 (&packs)[VPT]) {
  constexpr int ES = sizeof(T);
  const int shift = misalignment16(in);
  const char* const floor = reinterpret_cast<const char*>(in) - shift;
  const int lane = me % 32;
  uint32_t past[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e0 = (me + k * step) * VEC;
    // ex: the vector after the warp's last, whose floor granule holds the last one's tail: lanes
    // read only the words the shift reaches. At the row's end (ex == cols) only the granule's
    // first `shift` bytes lie inside the row: a shift ending mid-word takes its last as a half-word.
    const int ex = e0 + (32 - lane) * VEC;
    packs[k] = e0 < cols ? load_aligned16(floor + e0 * ES) : Bytes16{};
    const char* const word = floor + ex * ES + lane * 4;
    const bool reached = ex <= cols && lane * 4 < shift;
    const bool half_word = ex == cols && lane * 4 + 4 > shift;
    past[k] = !reached ? 0u
              : half_word ? uint32_t{*reinterpret_cast<const uint16_t*>(word)}
                          : *reinterpret_cast<const uint32_t*>(word);
  }
  with_shift16<ES>(shift, [&](auto shift_c) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (me + k * step) * VEC;
      const Bytes16 v = shared_granule_vector<decltype(shift_c)::value>(packs[k], past[k], lane, 32);
      packs[k] = e0 < cols ? v : pads;
    }
  });
}

template <typename T, class RowOp, int VEC, int VPT, bool kWhole = false, bool kShiftedIn = false>
__device__ __forceinline__ void row_wide_packed_body(const RowArgs<T, RowOp::kInputs>& args,
                                                     const typename RowOp::Extra& extra) {
  using Op = typename TileOpOf<RowOp>::type;
  constexpr bool kSum = HoldsInputSum<RowOp>::value;
  static_assert((sizeof(T) == 2 || sizeof(T) == 4) && Op::kInputs == 1 && Op::kOutputs == 1,
                "packed wide rows: one 16- or 32-bit input (or a held sum), one output");
  static_assert(VEC * VPT <= kWideTileValues, "wide tiles take one row a CTA, no loop");
  using Tile = RowTile<T, 1, VEC, VPT, true>;
  using PackT = typename Tile::PackT;
  constexpr int kColumnGroup = 4;  // parameters a step of the output pass (one 8- or 16-byte load)
  __shared__ typename Op::Stat slots[33];
  const int me = threadIdx.x, step = blockDim.x;
  const int64_t row = blockIdx.x;  // the grid holds every row
  const T* const in = args.in[0] + row * args.in_stride[0];
  PackT pack_of_pads;
#pragma unroll
  for (int e = 0; e < VEC; ++e) pack_of_pads.v[e] = from_acc<T>(Op::pad(0));
  const Bytes16 pads = bytes_of(pack_of_pads);
  static_assert(!(kShiftedIn && kSum), "shifted packed rows: one input");
  Bytes16 shifted[VPT];
  if constexpr (kShiftedIn) load_shifted_packs<T, VEC, VPT>(in, args.cols, me, step, pads, shifted);
  PackT packed[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e0 = (me + k * step) * VEC;
    if constexpr (kSum) {
      const T* const residual = args.in[1] + row * args.in_stride[1];
      Bytes16 x = pads, r = pads;
      if (kWhole || e0 < args.cols) x = load_aligned16(in + e0), r = load_aligned16(residual + e0);
      typename Op::Acc a[VEC], b[VEC];
      unpack_to_acc(pack_of<PackT>(x), a);
      unpack_to_acc(pack_of<PackT>(r), b);
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = a[e] + b[e];
      packed[k] = pack_from_acc<T>(a);
    } else if constexpr (kShiftedIn) {
      packed[k] = pack_of<PackT>(shifted[k]);
    } else {
      packed[k] = pack_of<PackT>(kWhole || e0 < args.cols ? load_aligned16(in + e0) : pads);
    }
  }
  if constexpr (kSum) {
    T* const sum = RowOp::second_row(extra, row);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (me + k * step) * VEC;
      if (kWhole || e0 < args.cols) store_pack_global(sum + e0, packed[k]);
    }
  }
  // Widened for each pass. An empty volatile asm on each packed word keeps the compiler from
  // reusing an earlier widening (which would hold the float32 tile across a reduction).
  auto widened = [&](int k) {
    Bytes16 b = bytes_of(packed[k]);
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(b.w[j]));
    return pack_of<PackT>(b);
  };
  auto widen_into = [&](Tile& tile) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) tile.unpack(0, k, widened(k));
  };
  const BlockGroup<Op, false, true> group{slots, args.two_phase};
  typename Op::Local local;
  if constexpr (IsTwoPhase<Op>::value) {  // row_wide_kernel_ext's path: two phases always
    const RowSpan span{row, me, step, args.cols, true};
    typename Op::First::Stat a;
    {
      Tile tile;
      widen_into(tile);
      a = group.template reduce<typename Op::First>(Op::fold_first(extra, span, tile.values));
    }
    typename Op::Second::Stat b;
    {
      Tile tile;
      widen_into(tile);
      b = group.template reduce<typename Op::Second>(Op::fold_second(extra, span, tile.values, a));
    }
    const typename Op::Params p = Op::finalize_two(extra, span, a, b);
    if (me == 0) Op::row_done(extra, span, p);
    local = Op::local_two(p);
  } else {
    typename Op::Stat mine;
    {
      Tile tile;
      widen_into(tile);
      mine = fold_tile<Op, true>(extra, row, me, step, args.cols, tile.values);
    }
    const typename Op::Stat stat = group.template reduce<Op>(mine);
    local = Op::local(finalize_row<Op, true>(extra, row, me, step, args.cols, stat, me == 0), mine);
  }
  T* const out = args.out + row * args.out_stride;
  if constexpr (kWhole) {
    Op::with_whole_columns(extra, [&](const auto& columns) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        RowTile<T, 1, VEC, 1, true> vector;
        vector.unpack(0, 0, widened(k));
        vector.template store_whole<Op>(out, nullptr, me + k * step, step, local, columns);
      }
    });
  } else {
    // Each vector's parameters before its widening: widened first, its floats waited in
    // registers beside the parameters' loads (float16 spilled them, ptxas). Through a RowTile
    // (RowTile::outputs) the widening moves ahead again (PTX), hence the loop of its own. The
    // parameters come four columns at a time, each vector's behind output_offset (ptxas, 32
    // registers with a bias: 84 bytes of spill, 8 with both measures; layer_norm's 64-register
    // form 12-20 -> 0).
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = output_offset<Op>((me + k * step) * VEC);
      if (e0 >= args.cols) continue;
      typename Op::Acc r[VEC];
#pragma unroll
      for (int g = 0; g < VEC; g += kColumnGroup) {
        typename Op::Column c[kColumnGroup];
        Op::template columns<kColumnGroup, true>(extra, e0 + g, args.cols, c);
        typename Op::Acc v[VEC];
        unpack_to_acc(widened(k), v);
#pragma unroll
        for (int e = 0; e < kColumnGroup; ++e) {
          const typename Op::Acc x[1] = {v[g + e]};
          r[g + e] = Op::output(x, local, c[e]);
        }
      }
      Tile::write(out, e0, args.cols, pack_from_acc<T>(r));
    }
  }
}

// The packed body, whole rows (cols = threads x VPT x VEC) apart where kWholeApart: only the
// kernels with registers to hold both bodies (the lean and 32-register ones spilled, ptxas).
template <typename T, class Op, int VEC, int VPT, bool kWholeApart, bool kShiftedIn>
__device__ __forceinline__ void row_wide_packed_rows(const RowArgs<T, Op::kInputs>& args, const typename Op::Extra& extra) {
  if constexpr (kWholeApart) {
    if (args.cols == static_cast<int>(blockDim.x) * VPT * VEC)
      return row_wide_packed_body<T, Op, VEC, VPT, true, kShiftedIn>(args, extra);
  }
  row_wide_packed_body<T, Op, VEC, VPT, false, kShiftedIn>(args, extra);
}

// One-statistic ops (rms_norm), by register budget (WideForm): kBase 32 registers, kMid 40,
// kRoomy 64. A bias's parameters spilled 80-84 bytes at 32, none at 40 (ptxas). Whole rows skip
// their bounds on the roomy form only: that body spilled 72-76 bytes at 40.
template <typename T, class Op, int VEC, int VPT, WideForm kForm, bool kShiftedIn = false>
__global__ void __launch_bounds__(kForm == WideForm::kMid ? kWideMidRowThreads : kWideRowThreads,
                                  kForm == WideForm::kRoomy ? 1 : 2)
row_wide_packed_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra) {
  static_assert(!IsTwoPhase<Op>::value, "two-phase ops take row_wide_packed_two_phase_kernel_ext");
  static_assert(kForm != WideForm::kLean, "the lean form is the two-phase kernel's");
  row_wide_packed_rows<T, Op, VEC, VPT, kForm == WideForm::kRoomy, kShiftedIn>(args, extra);
}

// Two-phase ops (layer_norm, rows of 225-512 threads): 64 registers a thread (24 bytes of spill,
// ptxas), or in the lean form 48 (28 bytes), one more row an SM for CTAs of up to 416 threads.
template <typename T, class Op, int VEC, int VPT, bool kLean, bool kShiftedIn = false>
__global__ void __maxnreg__(kLean ? 48 : 64)
row_wide_packed_two_phase_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra) {
  static_assert(IsTwoPhase<Op>::value, "one-statistic ops take row_wide_packed_kernel_ext");
  row_wide_packed_rows<T, Op, VEC, VPT, !kLean, kShiftedIn>(args, extra);
}

}  // namespace reducekit::kernels
