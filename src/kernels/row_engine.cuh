// SPDX-License-Identifier: Apache-2.0
// The row engine: one kernel family for every per-row op (softmax, log_softmax, their backward,
// the norms and their backward, the cross-entropy's rows).
//
// An op is a policy (see softmax_ops.cuh) that says
//   - pad(i):            the value of input i that leaves the statistic unchanged, so threads
//                        can fold whole tiles without testing which elements lie in the row;
//   - fold(values):      a thread's statistic (Stat) over its tile; it may rewrite the values
//                        in place (softmax keeps exp(x - thread max), so each element costs one exp);
//   - merge, identity:   how statistics combine (commutative);
//   - finalize(row):     per-row parameters (Params) from the row's statistic;
//   - local(p, mine):    per-tile factors from the row parameters and that tile's own fold;
//   - output(values, l): one output element from the (folded) inputs and the tile's factors.
// An op may also declare kTwoPhase, for rows held in one tile: the row is then reduced twice,
// with plain statistics, instead of once with the merged one (a softmax max, then the sum of
// exp(x - max); a layer_norm sum, then the squared deviations from the mean). Each butterfly
// step is then a max or an add, where the merged statistics cost exps (softmax) or divisions
// (Chan's merge); the merged form stays for rows streamed through several tiles (but for ops
// that declare kShiftedStream, row_stream.cuh):
//   - First, Second:     reduction policies (Stat, identity, merge) of the two statistics;
//   - fold_first(values) and fold_second(values, row's First): a thread's statistics (the
//                        second may rewrite the values); finalize_two(row First, row Second);
//                        local_two(params): the tile's factors for output().
//   Extended ops take (extra, span, ...) first, as with fold and finalize.
// Ops that need more than that (norms: per-column weight/bias, per-row mean/rstd, a second
// output) declare `using Extra = ...` (extra kernel arguments) and the extended hooks, which all
// receive the Extra and the RowSpan of the tile (row index, thread's first vector, step, cols):
//   - fold(extra, span, values), finalize(extra, span, row stat), row_done(extra, span, params)
//     (one thread per row, after finalize: writes per-row statistics);
//   - Column, columns<VEC, kAligned>(extra, e0, cols, Column (&)[VEC]): per-column parameters of
//     the VEC elements from e0, read at output time; output(values, local, column);
//   - kOutputs (1 or 2); with 2, second(values) is written to second_row(extra, row).
// Plain ops (softmax) go through PlainRowOp, which maps the extended hooks onto the plain ones,
// so both kinds share one body per kernel (row_*_kernel for plain ops, row_*_kernel_ext with the
// Extra as a second argument); the plain kernels' PTX is the same as before the extension.
// The engine owns the data movement:
//
//   row_warp_kernel   LANES (4..32) threads per row, 128/LANES rows per CTA, row in registers.
//   row_ring_kernel   one CTA (or cluster) per row, looping over rows, each thread holding its
//                     share in one register tile; the next rows stream into shared memory
//                     meanwhile (see below).
//   row_block_kernel  one CTA per row, or one cluster of CTAs per row (sm_90 distributed
//                     shared memory combines their statistics); the row is read once into
//                     registers and written from there.
//   row_stream_kernel the same groups for rows longer than their registers (row_stream.cuh):
//                     each thread covers `tiles` tiles (the largest tile size, or re-read
//                     rows' small one). The first `stash_tiles` are copied asynchronously
//                     into shared memory, the last stays in registers, any between are read
//                     again from global memory (L2) for the output pass, where every tile but
//                     the last is folded again. Tiles hold up to kRowTileWords accumulation
//                     words per thread.
//   row_staged_kernel one-input rows staged whole in shared memory by bulk copies, a CTA or a
//                     cluster's shares a row, any alignment (row_staged.cuh).
//   row_wide_*        the norm forwards' rows on one CTA of up to 1024 threads (row_wide.cuh).
//   split rows        rows spread over several CTAs through the chunk-statistics protocol
//                     (row_split.cuh).
//
// Thread-to-data layout: the row is a sequence of VEC-element vectors (16 bytes when aligned).
// Thread g of a group of G threads owns vectors g, g + G, g + 2G, ... so every warp load is
// one contiguous, coalesced 512-byte stretch:
//
//   vectors:  | t0 t1 ... tG-1 | t0 t1 ... tG-1 | ...      (slot 0, slot 1, ... of a tile)
//
// Reductions run in a fixed order (butterfly within warps, warp 0 over warp partials, cluster
// ranks 0..C-1 in order), and the configuration depends only on the row length and dtype, so
// results are bitwise deterministic and batch-invariant.
#pragma once

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <cuda/ptx>

#include <cstdint>
#include <type_traits>

#include "kernels/combine.cuh"
#include "kernels/numeric.cuh"
#include "kernels/vector_io.cuh"
#include "plan/row_kernel_plan.hpp"

namespace reducekit::kernels {

namespace cg = cooperative_groups;

constexpr int kWarpKernelThreads = 128;
constexpr int kMaxBlockThreads = 512;
// Plain block-kernel tiles of up to 32 values a thread fit in 64 registers. Held there, two
// 512-thread CTAs (or four of 256) stay resident per SM, and a row's loads need that many in
// flight; left free, the compiler spends 80-90 registers on them and halves the resident CTAs.
// 16-bit tiles of up to 16 values are held to 32 registers (four 512-thread CTAs an SM, seed
// Triton's geometry for bf16 softmax 4096x8192), which they fit without spills since a block CTA
// takes one row and keeps no row loop. float32 tiles of 16 values still spill at 32 and keep 64,
// as do cluster kernels (the cluster reduction's state). Ops with per-column parameters (the _ext
// block kernels) need more and would spill. Measured: LOG.md ("Measurements moved out of the
// source").
template <int kElemBytes, int kValues, bool kCluster>
constexpr int kRowMinCtas = kElemBytes == 2 && kValues <= 16 && !kCluster ? 4 : kValues <= 32 ? 2 : 1;
// Ring kernels (16-bit one-CTA rows looping over rows, the next ones in shared memory) of up to
// 32 values a thread are held to 64 registers as well: left free, layer_norm's took 82-84 and
// one 416-thread CTA an SM; held, 64 with a few spills, and faster (LOG.md). Larger ring tiles
// keep no bound (0 leaves it out; a bound of 1 changes ptxas's choices).
template <int kValues> constexpr int kRingMinCtas = kValues <= 32 ? 2 : 0;
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// Packs move as one uint4: copied member by member, a Pack of __half or __nv_bfloat16
// compiles to 2-byte accesses.
template <typename P> __device__ __forceinline__ Bytes16 bytes_of(const P& p) {
  static_assert(sizeof(P) == 16, "row packs are 16 bytes");
  Bytes16 b;
  memcpy(&b, &p, sizeof(P));
  return b;
}
template <typename P> __device__ __forceinline__ P pack_of(const Bytes16& b) {
  P p;
  memcpy(&p, &b, sizeof(P));
  return p;
}
// A pack of VEC accumulators rounded to T: 16-bit pairs round in one instruction (a bf16x2 /
// f16x2 conversion), the same rounding as one at a time.
template <typename T, int VEC, typename Acc> __device__ __forceinline__ Pack<T, VEC> pack_from_acc(const Acc (&v)[VEC]) {
  Pack<T, VEC> p;
  if constexpr (std::is_same<Acc, float>::value && std::is_same<T, __nv_bfloat16>::value && VEC % 2 == 0) {
#pragma unroll
    for (int e = 0; e < VEC; e += 2) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(v[e], v[e + 1]);
      memcpy(&p.v[e], &pair, sizeof(pair));
    }
  } else if constexpr (std::is_same<Acc, float>::value && std::is_same<T, __half>::value && VEC % 2 == 0) {
#pragma unroll
    for (int e = 0; e < VEC; e += 2) {
      const __half2 pair = __floats2half2_rn(v[e], v[e + 1]);
      memcpy(&p.v[e], &pair, sizeof(pair));
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) p.v[e] = from_acc<T>(v[e]);
  }
  return p;
}
// A pack's elements as accumulators: a bfloat16 pair widens from its 32-bit word with one
// shift and one mask (a bfloat16 is the top half of its float32).
template <typename T, int VEC, typename Acc> __device__ __forceinline__ void unpack_to_acc(const Pack<T, VEC>& p, Acc (&v)[VEC]) {
  if constexpr (std::is_same<Acc, float>::value && std::is_same<T, __nv_bfloat16>::value && VEC % 2 == 0) {
    uint32_t w[VEC / 2];
    memcpy(w, p.v, sizeof(w));
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = to_acc<Acc>(p.v[e]);
  }
}
// A whole pack from memory aligned to its size: 16 bytes (one vector), or 8 (four 16-bit columns).
template <typename P> __device__ __forceinline__ P load_pack(const void* src) {
  static_assert(sizeof(P) == 16 || sizeof(P) == 8, "packs of 16 or 8 bytes");
  if constexpr (sizeof(P) == 16) return pack_of<P>(load_aligned16(src));
  else return *static_cast<const P*>(src);
}
template <typename P> __device__ __forceinline__ void store_pack_global(void* dst, const P& p) {
  store_aligned16(dst, bytes_of(p));
}


// Reduction policies of one plain statistic, for kTwoPhase ops. Both merges are commutative
// bit for bit (fmax returns the non-NaN operand either way), so butterflies stay uniform.
template <typename Acc> struct RowMax {
  using Stat = StatVec<Acc, 1>;
  __device__ static Stat identity() { return {{-static_cast<Acc>(INFINITY)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{fmax(a.w[0], b.w[0])}}; }
};
template <typename Acc> struct RowSum {
  using Stat = StatVec<Acc, 1>;
  __device__ static Stat identity() { return {{Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0]}}; }
};
// Two sums at once (a streamed row's sums of deviations and of their squares, row_stream.cuh).
template <typename Acc> struct RowSumPair {
  using Stat = StatVec<Acc, 2>;
  __device__ static Stat identity() { return {{Acc(0), Acc(0)}}; }
  __device__ static Stat merge(const Stat& a, const Stat& b) { return {{a.w[0] + b.w[0], a.w[1] + b.w[1]}}; }
};

// Up to two inputs and one output, each [rows, cols] with its own row stride (in elements).
template <typename T, int NIN> struct RowArgs {
  const T* in[NIN];
  int64_t in_stride[NIN];
  T* out;
  int64_t out_stride;
  int64_t rows;
  int cols;
  bool two_phase = true;  // RowKernelConfig::two_phase
  bool l2_hints = false;  // RowKernelConfig::l2_hints
  bool read_back_second = false;  // RowKernelConfig::read_back_second
  int loads_ahead = 0;            // RowKernelConfig::loads_ahead
  // Rows of in[0] off their granules while out's rows and the op's parameters lie on theirs:
  // the packed wide rows load such rows by shifted granules (row_wide.cuh) and keep the rest.
  bool input_alone_shifted = false;
};

// Where a thread's tile lies: row index, the thread's first vector, the vectors between its
// slots, the row length, and whether whole vectors may move as 16-byte accesses (the kernel's
// kAligned, a constant once inlined). Elements of a tile inside the row form a prefix of its slot order
// (vector indices grow with the slot), so valid_elems() says which values are real, not pads.
struct RowSpan {
  int64_t row;
  int first, step, cols;
  bool aligned;
  template <int VEC, int VPT> __device__ __forceinline__ int valid_elems() const {
    int n = 0;
#pragma unroll
    for (int k = 0; k < VPT; ++k) n += min(max(cols - (first + k * step) * VEC, 0), VEC);
    return n;
  }
};

// Reads VEC per-column parameters of type P from e0 (as Acc), `fill` past the row end or
// when p is null. Whole vectors move as 16-byte loads (VEC * sizeof(P) is 16 or 32) when p is
// aligned: always under kAligned, else as the pointer says (the same for every row).
template <typename P, int VEC, bool kAligned, typename Acc>
__device__ __forceinline__ void load_columns(const P* p, int e0, int cols, Acc fill, Acc (&dst)[VEC]) {
  if (p == nullptr) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) dst[e] = fill;
  } else if ((kAligned || misalignment16(p) == 0) && e0 + VEC <= cols) {
    constexpr int kPer = 16 / sizeof(P) < VEC ? 16 / sizeof(P) : VEC;
    static_assert(VEC % kPer == 0, "column vectors are whole packs");
#pragma unroll
    for (int q = 0; q < VEC / kPer; ++q) {
      const auto pack = load_pack<Pack<P, kPer>>(p + e0 + q * kPer);
#pragma unroll
      for (int e = 0; e < kPer; ++e) dst[q * kPer + e] = to_acc<Acc>(pack.v[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) dst[e] = e0 + e < cols ? to_acc<Acc>(p[e0 + e]) : fill;
  }
}

// A vector's offset in the output pass, hidden from the compiler (an empty volatile asm) where
// the op has per-column parameters: a later vector's parameter loads then stay below this
// vector's stores instead of all rising to the top of the unrolled loop, where every vector's
// weights and biases were live at once and spilled (ptxas). The packed wide rows only: in
// RowTile::store it slowed the residual forms' long 16-bit rows.
template <class Op> __device__ __forceinline__ int output_offset(int e0) {
  if constexpr (!std::is_empty<typename Op::Column>::value) asm volatile("" : "+r"(e0));
  return e0;
}

struct NoRowExtra {};

template <class Op> struct PlainRowOp;
template <class Op> struct IsPlainRowOp { static constexpr bool value = false; };
template <class Op> struct IsPlainRowOp<PlainRowOp<Op>> { static constexpr bool value = true; };

// The extended hooks of a plain op that the engine calls directly: no extra arguments, no
// per-column parameters, one output. fold and finalize go to Plain's (see fold_tile).
template <class Op> struct PlainRowOp : Op {
  using Plain = Op;
  using Extra = NoRowExtra;
  struct Column {};
  static constexpr int kOutputs = 1;
  template <int VEC, bool kAligned>
  __device__ __forceinline__ static void columns(const Extra&, int, int, Column (&)[VEC]) {}
  template <class Local>
  __device__ __forceinline__ static typename Op::Acc output(const typename Op::Acc (&v)[Op::kInputs], const Local& l,
                                                            const Column&) {
    return Op::output(v, l);
  }
};

// fold / finalize / row_done of a tile at (row, first, step, cols). Plain ops get no RowSpan at
// all: building one, even unused, reorders their PTX (same instructions, other register numbers).
template <class Op, bool kAligned, int NIN, int N>
__device__ __forceinline__ typename Op::Stat fold_tile(const typename Op::Extra& extra, int64_t row, int first, int step,
                                                       int cols, typename Op::Acc (&v)[NIN][N]) {
  if constexpr (IsPlainRowOp<Op>::value) return Op::Plain::fold(v);
  else return Op::fold(extra, RowSpan{row, first, step, cols, kAligned}, v);
}
template <class Op, bool kAligned>
__device__ __forceinline__ typename Op::Params finalize_row(const typename Op::Extra& extra, int64_t row, int first,
                                                            int step, int cols, const typename Op::Stat& stat,
                                                            bool writer) {
  if constexpr (IsPlainRowOp<Op>::value) {
    return Op::Plain::finalize(stat);
  } else {
    const RowSpan span{row, first, step, cols, kAligned};
    const typename Op::Params p = Op::finalize(extra, span, stat);
    if (writer) Op::row_done(extra, span, p);
    return p;
  }
}

template <class Op, class = void> struct IsTwoPhase : std::false_type {};
template <class Op> struct IsTwoPhase<Op, std::void_t<decltype(Op::kTwoPhase)>> : std::bool_constant<Op::kTwoPhase> {};

// Two-input ops whose statistics and outputs read one value an element, the inputs' sum rounded
// to T, written as their second output (the fused residual norms: s = x + residual): wide rows
// hold s alone and run Op::OneInput, the same op on one input, over it.
template <class Op, class = void> struct HoldsInputSum : std::false_type {};
template <class Op>
struct HoldsInputSum<Op, std::void_t<typename Op::OneInput>> : std::bool_constant<Op::kInputs == 2 && Op::kOutputs == 2> {};
template <class Op, bool = HoldsInputSum<Op>::value> struct TileOpOf { using type = Op; };
template <class Op> struct TileOpOf<Op, true> { using type = typename Op::OneInput; };

// The factors a one-tile row's thread needs for output(), from its tile `v` and `group`, which
// reduces a policy's statistic over the row's threads (group.template reduce<P>(stat): every
// thread gets the row's value). `writer`: the one thread that records per-row statistics.
// kTwoPhase ops reduce two plain statistics in turn where group.two_phase() says so (one CTA or
// warp per row, RowArgs::two_phase set), else the op's merged statistic once.
template <class Op, bool kAligned, class Group, int NIN, int N>
__device__ __forceinline__ typename Op::Local one_tile_factors(const typename Op::Extra& extra, int64_t row, int first,
                                                               int step, int cols, typename Op::Acc (&v)[NIN][N],
                                                               const Group& group, bool writer) {
  if constexpr (IsTwoPhase<Op>::value) if (group.two_phase()) {
    using First = typename Op::First;
    using Second = typename Op::Second;
    if constexpr (IsPlainRowOp<Op>::value) {
      const typename First::Stat a = group.template reduce<First>(Op::Plain::fold_first(v));
      const typename Second::Stat b = group.template reduce<Second>(Op::Plain::fold_second(v, a));
      return Op::Plain::local_two(Op::Plain::finalize_two(a, b));
    } else {
      const RowSpan span{row, first, step, cols, kAligned};
      const typename First::Stat a = group.template reduce<First>(Op::fold_first(extra, span, v));
      const typename Second::Stat b = group.template reduce<Second>(Op::fold_second(extra, span, v, a));
      const typename Op::Params p = Op::finalize_two(extra, span, a, b);
      if (writer) Op::row_done(extra, span, p);
      return Op::local_two(p);
    }
  }
  const typename Op::Stat mine = fold_tile<Op, kAligned>(extra, row, first, step, cols, v);
  const typename Op::Stat stat = group.template reduce<Op>(mine);
  return Op::local(finalize_row<Op, kAligned>(extra, row, first, step, cols, stat, writer), mine);
}

// Ops that give the parameters of vectors wholly inside the row apart (Op::with_whole_columns,
// the norm forwards): their whole tiles can be written without bounds (RowTile::store_whole).
template <class Op, class = void> struct HasWholeColumns : std::false_type {};
template <class Op>
struct HasWholeColumns<Op, std::void_t<typename Op::WholeColumnsAnyCase>> : std::true_type {};

// One thread's share of a row: VPT vectors of each input, converted to the accumulation type
// once, with elements outside the row set to the op's pad values. Element e of slot k is
// values[i][k * VEC + e]; slot k covers vector index first + k * step.
// kAligned: every row start is 16-byte aligned, so whole vectors move as single accesses.
// Otherwise each row's own alignment decides (vector_io.cuh): aligned rows move as above,
// shifted ones as aligned granules shifted into place; the element-to-thread layout is the same,
// so the arithmetic, and therefore every result bit, is the same for all (batch invariance).
template <typename T, int NIN, int VEC, int VPT, bool kAligned> struct RowTile {
  using Acc = acc_t<T>;
  using PackT = Pack<T, VEC>;
  static constexpr int kElems = VEC * VPT;
  // Shifted rows of tiles of 4 vectors and more share granules between lanes (load_shifted,
  // write_shifted): two granules a vector in registers held large tiles' loads back. Smaller
  // tiles keep two loads and piecewise stores a vector: the shuffles' registers spill the
  // 32-register one-vector kernels.
  static constexpr bool kShareGranules = !kAligned && VPT >= 4;
  Acc values[NIN][kElems];

  __device__ __forceinline__ void unpack(int i, int k, const PackT& p) {
    Acc v[VEC];
    unpack_to_acc(p, v);
#pragma unroll
    for (int e = 0; e < VEC; ++e) values[i][k * VEC + e] = v[e];
  }

  // A vector cut by the row end is read element by element so nothing past it is touched.
  // With kShareGranules the whole warp must call it (it shuffles). `load16` moves the whole
  // 16-byte granules (vector_io.cuh: plain, or under an L2 policy).
  template <class Op, class Load = PlainLoad16>
  __device__ __forceinline__ void load(const T* const (&row)[NIN], int cols, int first, int step, Load load16 = {}) {
    if constexpr (kShareGranules) {
      load_shifted<Op>(row, cols, first, step, load16);
    } else {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int e0 = (first + k * step) * VEC;
#pragma unroll
        for (int i = 0; i < NIN; ++i) {
          if (e0 + VEC > cols) load_elements<Op>(i, k, row[i], e0, cols);
          else if (kAligned) unpack(i, k, pack_of<PackT>(load16(row[i] + e0)));
          else unpack(i, k, pack_of<PackT>(load_vector16<T, VEC>(row[i], e0, cols, load16)));
        }
      }
    }
  }

  template <class Op>
  __device__ __forceinline__ void load_elements(int i, int k, const T* row, int e0, int cols) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) values[i][k * VEC + e] = e0 + e < cols ? to_acc<Acc>(row[e0 + e]) : Op::pad(i);
  }

  // Rows at their own alignment, one 16-byte load a vector as for aligned rows. The lanes of a
  // `width`-lane group hold consecutive vectors of each slot, so the granule after a lane's
  // vector floor is its right neighbour's floor: each lane loads its floor granule and takes
  // the next by shuffles; the group's last lane takes its from lanes 0-3, which load one word
  // each of the granule past the group (groups are 4 to 32 lanes: warp rows and the fused
  // backward's row lanes start at 4). A vector whose granules reach past its row moves element
  // by element.
  template <class Op, class Load>
  __device__ __forceinline__ void load_shifted(const T* const (&row)[NIN], int cols, int first, int step, Load load16) {
    const int width = step < 32 ? step : 32;
    const int lane = first % width;
    int shift_elems[NIN];  // granule g of a row spans its elements [g * VEC - shift_elems, + VEC)
#pragma unroll
    for (int i = 0; i < NIN; ++i) shift_elems[i] = misalignment16(row[i]) / static_cast<int>(sizeof(T));
    Bytes16 lo[NIN][VPT];
    uint32_t past[NIN][VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (first + k * step) * VEC;
      const int ex = e0 + (width - lane) * VEC;  // the first element of the group's next vector
#pragma unroll
      for (int i = 0; i < NIN; ++i) {
        const int s = shift_elems[i];
        const bool lo_inside = (s == 0 || e0 >= VEC) && e0 + VEC - s <= cols;
        lo[i][k] = lo_inside ? load16(row[i] + e0 - s) : Bytes16{};
        const bool past_inside = lane < 4 && ex + VEC - s <= cols;
        past[i][k] = past_inside ? reinterpret_cast<const uint32_t*>(row[i] + ex - s)[lane] : 0u;
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (first + k * step) * VEC;
#pragma unroll
      for (int i = 0; i < NIN; ++i) {
        Bytes16 hi;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t next = __shfl_down_sync(0xffffffffu, lo[i][k].w[w], 1, width);
          const uint32_t tail = __shfl_sync(0xffffffffu, past[i][k], w, width);
          hi.w[w] = lane == width - 1 ? tail : next;
        }
        const int s = shift_elems[i];
        if (s == 0 && e0 + VEC <= cols) unpack(i, k, pack_of<PackT>(lo[i][k]));
        else if (s != 0 && e0 >= VEC && e0 + 2 * VEC - s <= cols)
          unpack(i, k, pack_of<PackT>(funnel16(lo[i][k], hi, s * static_cast<int>(sizeof(T)))));
        else load_elements<Op>(i, k, row[i], e0, cols);
      }
    }
  }

  // Slot k's outputs: r[e] = Op::output(values of its element e, l, c[e]), and r2[e] =
  // Op::second(values) for two-output ops.
  template <class Op, class Local>
  __device__ __forceinline__ void outputs(int k, const Local& l, const typename Op::Column (&c)[VEC], Acc (&r)[VEC],
                                          Acc (&r2)[VEC]) const {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      Acc v[NIN];
#pragma unroll
      for (int i = 0; i < NIN; ++i) v[i] = values[i][k * VEC + e];
      r[e] = Op::output(v, l, c[e]);
      if constexpr (Op::kOutputs == 2) r2[e] = Op::second(v);
    }
  }

  // Writes out[e] = Op::output(values of element e, l, column parameters of e) for every
  // element inside the row (and out2[e] = Op::second(values) for two-output ops). With
  // kShareGranules the whole warp must call it (it shuffles; a lane with no row passes cols = 0).
  template <class Op, class Local>
  __device__ __forceinline__ void store(T* out, T* out2, int cols, int first, int step, const Local& l,
                                        const typename Op::Extra& extra) const {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (first + k * step) * VEC;
      if (!kShareGranules && e0 >= cols) continue;
      typename Op::Column c[VEC];
      Op::template columns<VEC, kAligned>(extra, e0, cols, c);
      Acc r[VEC], r2[VEC];
      outputs<Op>(k, l, c, r, r2);
      const PackT o = pack_from_acc<T>(r);
      PackT o2;
      if constexpr (Op::kOutputs == 2) o2 = pack_from_acc<T>(r2);
      if constexpr (!kShareGranules) {
        write(out, e0, cols, o);
        if constexpr (Op::kOutputs == 2) write(out2, e0, cols, o2);
      } else {
        const int width = step < 32 ? step : 32;
        write_shifted(out, e0, cols, o, first % width, width);
        if constexpr (Op::kOutputs == 2) write_shifted(out2, e0, cols, o2, first % width, width);
      }
    }
  }

  // store(), but a one-input tile of a two-phase op (layer_norm) wholly inside an aligned row
  // goes through store_whole (one-tile rows: the block and ring kernels; in the stream kernels,
  // for two inputs and for rms_norm's tiles of 2-8 vectors the extra path spilled, ptxas).
  template <class Op, class Local>
  __device__ __forceinline__ void store_row(T* out, T* out2, int cols, int first, int step, const Local& l,
                                            const typename Op::Extra& extra) const {
    if constexpr (kAligned && NIN == 1 && HasWholeColumns<Op>::value && IsTwoPhase<Op>::value) {
      if ((first + (VPT - 1) * step + 1) * VEC <= cols)
        return Op::with_whole_columns(extra, [&](const auto& columns) { store_whole<Op>(out, out2, first, step, l, columns); });
    }
    store<Op>(out, out2, cols, first, step, l, extra);
  }

  // store() of a tile wholly inside an aligned row: no bounds, the parameters from `columns`
  // (Op::with_whole_columns), the same values and arithmetic.
  template <class Op, class Local, class Columns>
  __device__ __forceinline__ void store_whole(T* out, T* out2, int first, int step, const Local& l,
                                              const Columns& columns) const {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int e0 = (first + k * step) * VEC;
      typename Op::Column c[VEC];
      columns(e0, c);
      Acc r[VEC], r2[VEC];
      outputs<Op>(k, l, c, r, r2);
      store_pack_global(out + e0, pack_from_acc<T>(r));
      if constexpr (Op::kOutputs == 2) store_pack_global(out2 + e0, pack_from_acc<T>(r2));
    }
  }

  __device__ __forceinline__ static void write(T* out, int e0, int cols, const PackT& o) {
    if (e0 + VEC > cols) write_elements(out, e0, cols, o, true, true);
    else if (kAligned) store_pack_global(out + e0, o);
    else store_vector16<sizeof(T)>(out + e0, bytes_of(o));
  }

  // The elements of o inside the row: those in its floor granule (head) and/or the rest (tail).
  __device__ __forceinline__ static void write_elements(T* out, int e0, int cols, const PackT& o, bool head, bool tail) {
    const int head_elems = (16 - misalignment16(out)) % 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (e0 + e < cols && (e < head_elems ? head : tail)) out[e0 + e] = o.v[e];
  }

  // The store side of load_shifted: lane `lane` of a `width`-lane group holds vector e0 / VEC,
  // its right neighbour the next one, so the granule after a lane's floor granule (its vector's
  // tail, the neighbour's head) goes out as one 16-byte store when it lies inside the row; the
  // rest (a group's first head and last tail, the row's ends) as natural pieces or elements.
  __device__ __forceinline__ static void write_shifted(T* out, int e0, int cols, const PackT& o, int lane, int width) {
    const Bytes16 b = bytes_of(o);
    Bytes16 next;
#pragma unroll
    for (int w = 0; w < 4; ++w) next.w[w] = __shfl_down_sync(0xffffffffu, b.w[w], 1, width);
    if (e0 >= cols) return;
    const int shift = misalignment16(out);
    const bool whole = e0 + VEC <= cols;
    if (shift == 0) {
      if (whole) store_aligned16(out + e0, b);
      else write_elements(out, e0, cols, o, true, true);
      return;
    }
    // In elements: the next granule ends 2 * VEC - shift_elems past e0, the floor one VEC - shift_elems.
    const int shift_elems = shift / static_cast<int>(sizeof(T));
    const bool tail_by_me = lane != width - 1 && e0 + 2 * VEC - shift_elems <= cols;  // with the neighbour's head
    const bool head_by_left = lane != 0 && e0 >= VEC && e0 + VEC - shift_elems <= cols;
    if (tail_by_me) store_aligned16(reinterpret_cast<char*>(out + e0) + (16 - shift), funnel16(b, next, 16 - shift));
    if (whole) store_vector16<sizeof(T)>(out + e0, b, !head_by_left, !tail_by_me);
    else write_elements(out, e0, cols, o, !head_by_left, !tail_by_me);
  }

  // Starts asynchronous copies of this thread's slots, still in the storage type, into its
  // shared-memory slots, so a CTA can have every parked tile of a long row in flight at
  // once. Completion: __pipeline_commit() then __pipeline_wait_prior(0) in the same thread.
  // Cut vectors are copied element by element; elements past the row end are not read. A
  // shifted row's vectors cannot be copied asynchronously (cp.async takes aligned sources):
  // they are loaded (vector_io.cuh) and stored to the slot, a synchronous copy.
  __device__ __forceinline__ static void prefetch(const T* const (&row)[NIN], int cols, int first, int step,
                                                  PackT* smem, int thread, int threads) {
#pragma unroll
    for (int i = 0; i < NIN; ++i)
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int e0 = (first + k * step) * VEC;
        PackT* slot = &smem[(i * VPT + k) * threads + thread];
        if ((kAligned || misalignment16(row[i]) == 0) && e0 + VEC <= cols) {
          __pipeline_memcpy_async(slot, row[i] + e0, sizeof(PackT));
        } else if (!kAligned && e0 + VEC <= cols) {
          *slot = pack_of<PackT>(load_vector16<T, VEC>(row[i], e0, cols));
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            if (e0 + e < cols) slot->v[e] = row[i][e0 + e];
        }
      }
  }

  // Reads back the slots prefetch() parked in shared memory. Each thread owns its own slots
  // (index `thread`, `threads` apart), so no barrier is needed around them.
  template <class Op>
  __device__ __forceinline__ void unstash(const PackT* smem, int cols, int first, int step, int thread,
                                          int threads) {
#pragma unroll
    for (int i = 0; i < NIN; ++i)
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int e0 = (first + k * step) * VEC;
        const PackT p = load_pack<PackT>(&smem[(i * VPT + k) * threads + thread]);
        if (e0 + VEC <= cols) {
          unpack(i, k, p);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) values[i][k * VEC + e] = e0 + e < cols ? to_acc<Acc>(p.v[e]) : Op::pad(i);
        }
      }
  }
};

// A cluster row's CTAs merge their statistics through distributed shared memory on one cluster
// barrier an exchange: each CTA writes its statistic into slot `rank` of every CTA's `set` (one
// slot a CTA), the barrier, then each merges its own set in rank order (identically in every
// CTA). A kernel making several exchanges alternates between two sets (kClusterSetSlots slots
// apart): a CTA writes a set again two exchanges later, past a barrier that every peer reached
// after reading it. No CTA reads a peer's memory, so none waits for its peers before leaving.
// A peer's shared memory may be written only once the peer has started: every thread arrives
// at the kernel's start (cluster_arrive_at_start) and waits on it (cluster_wait_started) before
// its first exchange.
constexpr int kClusterSetSlots = kMaxClusterSize;
__device__ __forceinline__ void cluster_arrive_at_start() { cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_relaxed); }
__device__ __forceinline__ void cluster_wait_started() { cuda::ptx::barrier_cluster_wait(); }

template <class Op>
__device__ __forceinline__ typename Op::Stat cluster_exchange(typename Op::Stat s, typename Op::Stat* set) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned ctas = cluster.num_blocks(), rank = cluster.block_rank();
  if (threadIdx.x < ctas) *cluster.map_shared_rank(set + rank, threadIdx.x) = s;
  cluster.sync();
  typename Op::Stat r = set[0];
  // Rolled: unrolled, the merges' loads took registers the tile needs (ptxas: rms_norm float32's
  // cluster kernel 64 -> 77, one CTA an SM fewer).
#pragma unroll 1
  for (unsigned q = 1; q < ctas; ++q) r = Op::merge(r, set[q]);
  return r;
}
// A kernel's next exchange of several: over set `set` of `sets` (2 x kClusterSetSlots slots of a
// statistic at least P's size), then `set` flips.
template <class P, class Slot>
__device__ __forceinline__ typename P::Stat cluster_exchange_next(typename P::Stat s, Slot* sets, int& set) {
  static_assert(sizeof(typename P::Stat) <= sizeof(Slot), "cluster slots too small");
  typename P::Stat* const slots = reinterpret_cast<typename P::Stat*>(sets + set * kClusterSetSlots);
  set ^= 1;
  return cluster_exchange<P>(s, slots);
}

// Where a thread sits among its row's threads: one CTA, or a cluster of CTAs, per row; groups
// take rows first, first + groups, ... (the grid holds whole clusters).
struct RowPlace {
  int cluster_size;  // CTAs per row
  int step;          // threads per row: the vectors between a thread's consecutive slots
  int me;            // this thread's index among them
  int64_t first;     // this group's first row
  int64_t groups;    // groups in the grid
};
__device__ __forceinline__ RowPlace row_place() {
  cg::cluster_group cluster = cg::this_cluster();
  const int size = static_cast<int>(cluster.num_blocks());
  return {size, static_cast<int>(blockDim.x) * size, static_cast<int>(cluster.block_rank() * blockDim.x + threadIdx.x),
          int64_t(blockIdx.x / size), int64_t(gridDim.x / size)};
}

// Row groups for one_tile_factors: LANES lanes of a warp, or a CTA / cluster. The CTA's
// reduction slots (33 of Op::Stat) serve any policy whose statistic is no larger; consecutive
// reductions may reuse them (each ends with a barrier after its last write, and the next writes
// only after its first barrier, which every reader has passed). A cluster row's one exchange
// takes its own slots (cluster_exchange).
// LANES 0: the lane count given at run time (`lanes`).
template <int LANES> struct LaneGroup {
  bool two_phase_rows;  // RowArgs::two_phase
  int lanes = LANES;
  __device__ __forceinline__ bool two_phase() const { return two_phase_rows; }
  template <class P> __device__ __forceinline__ typename P::Stat reduce(typename P::Stat s) const {
    if constexpr (LANES == 0) return lane_butterfly_reduce<P>(s, lanes);
    else return lane_butterfly_reduce<P, LANES>(s);
  }
};
// kCluster: the row spans a cluster of CTAs. One-CTA rows are compiled without the cluster
// reduction: its code alone pushed the 64-value layer_norm tile into spills (ptxas: 84 bytes of
// spill stores with it, 4 without). cluster_set: the slots of the row's one cluster_exchange.
template <class Op, bool kCluster, bool kAlwaysTwoPhase = false> struct BlockGroup {
  static_assert(!(kCluster && kAlwaysTwoPhase), "cluster rows reduce the merged statistic once");
  typename Op::Stat* slots;
  bool two_phase_rows;  // RowArgs::two_phase
  typename Op::Stat* cluster_set = nullptr;
  // A cluster-wide reduction costs a round trip through distributed shared memory and a cluster
  // barrier, so rows spread over a cluster reduce the merged statistic once instead of two plain
  // ones (two were slower at 256x262144, LOG.md).
  // kAlwaysTwoPhase: the merged path is not compiled at all (wide rows: their plans take two).
  __device__ __forceinline__ bool two_phase() const { return kAlwaysTwoPhase || (two_phase_rows && !kCluster); }
  template <class P> __device__ __forceinline__ typename P::Stat reduce(typename P::Stat s) const {
    static_assert(sizeof(typename P::Stat) <= sizeof(typename Op::Stat), "reduction slots too small");
    s = block_butterfly_reduce<P>(s, reinterpret_cast<typename P::Stat*>(slots));
    if constexpr (kCluster) {
      cluster_wait_started();
      s = cluster_exchange<P>(s, reinterpret_cast<typename P::Stat*>(cluster_set));
    }
    return s;
  }
};

// Kernel bodies take the extended interface (plain ops arrive wrapped in PlainRowOp).
// LANES 0: `lanes` lanes a row (a power of two from 4 to 32) at run time, one kernel for every
// width; the same elements to the same lanes and the same merges as a kernel of that LANES.
template <typename T, class Op, int VEC, int VPT, int LANES, bool kAligned>
__device__ __forceinline__ void row_warp_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                              int lanes = LANES) {
  constexpr int NIN = Op::kInputs;
  const int lanes_log2 = __ffs(lanes) - 1;
  const int rows_per_block = kWarpKernelThreads >> lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  for (int64_t base = int64_t(blockIdx.x) * rows_per_block; base < args.rows;
       base += int64_t(gridDim.x) * rows_per_block) {
    // Groups past the last row still take part in the shuffles, with an empty row.
    const int64_t row = base + (threadIdx.x >> lanes_log2);
    const bool live = row < args.rows;
    const int cols = live ? args.cols : 0;
    const int64_t r = live ? row : 0;
    const T* in[NIN];
#pragma unroll
    for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + r * args.in_stride[i];

    RowTile<T, NIN, VEC, VPT, kAligned> tile;
    tile.template load<Op>(in, cols, lane, lanes);
    const auto local = one_tile_factors<Op, kAligned>(extra, r, lane, lanes, cols, tile.values,
                                                      LaneGroup<LANES>{args.two_phase, lanes}, live && lane == 0);
    T* out2 = nullptr;
    if constexpr (Op::kOutputs == 2) out2 = Op::second_row(extra, r);
    tile.template store<Op>(args.out + r * args.out_stride, out2, cols, lane, lanes, local, extra);
  }
}

template <typename T, class Op, int VEC, int VPT, int LANES, bool kAligned>
__global__ void __launch_bounds__(kWarpKernelThreads)
row_warp_kernel(RowArgs<T, Op::kInputs> args, int lanes) {
  row_warp_body<T, PlainRowOp<Op>, VEC, VPT, LANES, kAligned>(args, NoRowExtra{}, LANES == 0 ? lanes : LANES);
}

template <typename T, class Op, int VEC, int VPT, int LANES, bool kAligned>
__global__ void __launch_bounds__(kWarpKernelThreads)
row_warp_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra, int lanes) {
  row_warp_body<T, Op, VEC, VPT, LANES, kAligned>(args, extra, LANES == 0 ? lanes : LANES);
}

// Rows whose share fits one register tile a thread, as a loop: CTA (or cluster) b takes rows
// b, b + G, b + 2G, ... with the next kRing rows already streaming into a ring of shared-
// memory slots (cp.async), so memory stays busy while a row is reduced and written. Each
// thread reads back only the slots it filled itself, and its cp.async groups complete in
// order, so the ring needs no barrier.
template <typename T, class Op, int VEC, int VPT, bool kAligned>
__device__ __forceinline__ void row_ring_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                              typename Op::Stat* slots) {
  constexpr int NIN = Op::kInputs;
  constexpr int kRing = kRowRing;  // a constant: cp.async.wait_group takes an immediate
  using Tile = RowTile<T, NIN, VEC, VPT, kAligned>;
  extern __shared__ __align__(16) unsigned char ring_bytes[];
  auto* ring = reinterpret_cast<typename Tile::PackT*>(ring_bytes);

  const RowPlace at = row_place();
  const int step = at.step, me = at.me;
  const int threads = blockDim.x;
  const int slot_stride = NIN * VPT * threads;
  const int cols = args.cols;
  const int64_t row_step = at.groups;

  auto fetch = [&](int64_t row, int slot) {
    if (row < args.rows) {
      const T* in[NIN];
#pragma unroll
      for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
      Tile::prefetch(in, cols, me, step, ring + slot * slot_stride, threadIdx.x, threads);
    }
    __pipeline_commit();  // one group per row, empty past the end, so the counting holds
  };
  // Shifted rows (no kAligned) cannot be copied asynchronously (cp.async takes aligned
  // sources): they load straight into registers, the ring unused (the launcher gives it no memory).
  int64_t row = at.first;
  if constexpr (kAligned) {
#pragma unroll
    for (int k = 0; k < kRing; ++k) fetch(row + k * row_step, k);
  }

  for (int slot = 0; row < args.rows; row += row_step, slot = (slot + 1) % kRing) {
    Tile tile;
    if constexpr (kAligned) {
      __pipeline_wait_prior(kRing - 1);  // this row's group is in
      tile.template unstash<Op>(ring + slot * slot_stride, cols, me, step, threadIdx.x, threads);
      fetch(row + kRing * row_step, slot);
    } else {
      const T* in[NIN];
#pragma unroll
      for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
      tile.template load<Op>(in, cols, me, step);
    }

    const auto local = one_tile_factors<Op, kAligned>(extra, row, me, step, cols, tile.values,
                                                      BlockGroup<Op, false>{slots, args.two_phase}, me == 0);
    T* out2 = nullptr;
    if constexpr (Op::kOutputs == 2) out2 = Op::second_row(extra, row);
    tile.template store_row<Op>(args.out + row * args.out_stride, out2, cols, me, step, local, extra);
  }
}

template <typename T, class Op, int VEC, int VPT, bool kAligned>
__global__ void __launch_bounds__(kMaxBlockThreads, kRingMinCtas<VEC * VPT * Op::kInputs>)
row_ring_kernel(RowArgs<T, Op::kInputs> args) {
  __shared__ typename Op::Stat slots[33];  // the reduction slots (block_butterfly_reduce)
  row_ring_body<T, PlainRowOp<Op>, VEC, VPT, kAligned>(args, NoRowExtra{}, slots);
}

template <typename T, class Op, int VEC, int VPT, bool kAligned>
__global__ void __launch_bounds__(kMaxBlockThreads, kRingMinCtas<VEC * VPT * Op::kInputs>)
row_ring_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra) {
  __shared__ typename Op::Stat slots[33];
  row_ring_body<T, Op, VEC, VPT, kAligned>(args, extra, slots);
}

// One CTA (or cluster: kCluster) per row, the row read once into registers and written from
// there. The grid holds exactly one CTA (cluster) a row, so tiles of up to 32 values keep no row
// loop: a loop's live state pushed the 32-register 16-value tiles into spills (ptxas: 24-40
// bytes, none without). Larger tiles keep the loop (one pass of it): without it ptxas spilled
// the float32 64-value _ext kernel 120 bytes instead of 4, and those rows ran slower (LOG.md).
template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kCluster, bool kAlwaysTwoPhase = false>
__device__ __forceinline__ void row_block_body(RowArgs<T, Op::kInputs> args, const typename Op::Extra& extra,
                                               typename Op::Stat* slots, typename Op::Stat* cluster_set) {
  constexpr int NIN = Op::kInputs;
  constexpr bool kRowLoop = VEC * VPT * NIN > 32;
  int step = blockDim.x, me = threadIdx.x;
  int64_t row = blockIdx.x, rows_apart = gridDim.x;
  if constexpr (kCluster || kRowLoop) {
    const RowPlace at = row_place();
    step = at.step, me = at.me, row = at.first, rows_apart = at.groups;
  }
  if constexpr (kCluster) cluster_arrive_at_start();
  for (; row < args.rows; row += rows_apart) {  // uniform over the row's CTAs
    const T* in[NIN];
#pragma unroll
    for (int i = 0; i < NIN; ++i) in[i] = args.in[i] + row * args.in_stride[i];
    RowTile<T, NIN, VEC, VPT, kAligned> tile;
    tile.template load<Op>(in, args.cols, me, step);
    const BlockGroup<Op, kCluster, kAlwaysTwoPhase> group{slots, args.two_phase, cluster_set};
    const auto local = one_tile_factors<Op, kAligned>(extra, row, me, step, args.cols, tile.values, group, me == 0);
    T* out2 = nullptr;
    if constexpr (Op::kOutputs == 2) out2 = Op::second_row(extra, row);
    tile.template store_row<Op>(args.out + row * args.out_stride, out2, args.cols, me, step, local, extra);
    if constexpr (!kRowLoop) break;
  }
}

template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kCluster>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinCtas<sizeof(T), VEC * VPT * Op::kInputs, kCluster>)
row_block_kernel(RowArgs<T, Op::kInputs> args) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_set[kCluster ? kClusterSetSlots : 1];
  row_block_body<T, PlainRowOp<Op>, VEC, VPT, kAligned, kCluster>(args, NoRowExtra{}, slots, cluster_set);
}

template <typename T, class Op, int VEC, int VPT, bool kAligned, bool kCluster>
__global__ void __launch_bounds__(kMaxBlockThreads)
row_block_kernel_ext(RowArgs<T, Op::kInputs> args, typename Op::Extra extra) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_set[kCluster ? kClusterSetSlots : 1];
  row_block_body<T, Op, VEC, VPT, kAligned, kCluster>(args, extra, slots, cluster_set);
}

// The block kernels held to 72 registers, for float32 rows off their granules at 32 values a
// thread (one-CTA rows of about 9k-16k): a register cap, not a launch bound, which for two 512-thread
// CTAs would mean 64. Free, the _ext kernels may take more than two CTAs of the row's threads
// leave room for (80 for rms_norm: one 448-thread CTA an SM); the plain kernels' launch bound
// holds them to 64, where softmax's shifted tile spills. The launch picks the capped kernel where
// it keeps more CTAs resident, or as many with more registers (row_launch.cuh).
constexpr int kCappedBlockRegisters = 72;
template <typename T, class Op, int VEC, int VPT>
__global__ void __maxnreg__(kCappedBlockRegisters)
row_block_kernel_ext_capped(RowArgs<T, Op::kInputs> args, typename Op::Extra extra) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_set[1];
  row_block_body<T, Op, VEC, VPT, /*kAligned=*/false, /*kCluster=*/false>(args, extra, slots, cluster_set);
}

template <typename T, class Op, int VEC, int VPT>
__global__ void __maxnreg__(kCappedBlockRegisters) row_block_kernel_capped(RowArgs<T, Op::kInputs> args) {
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_set[1];
  row_block_body<T, PlainRowOp<Op>, VEC, VPT, /*kAligned=*/false, /*kCluster=*/false>(args, NoRowExtra{}, slots,
                                                                                      cluster_set);
}

}  // namespace reducekit::kernels
