// SPDX-License-Identifier: Apache-2.0
// 16-byte vectors of a row at any element alignment: the loads and stores the row, reduce and
// norm-gradient kernels share.
//
// A row that starts `shift` bytes past a 16-byte boundary (odd length or stride, a sliced or
// offset view) holds each of its 16-byte vectors across two aligned granules:
//
//   granule g               granule g + 1
//   | . . . . . a a b b c c | d d e e f f g g h h . . . . . . |   shift = 10: the vector is a..h
//
// Loads read both granules as aligned 16-byte accesses (a neighbour's read of the same granule
// hits L1) and funnel-shift the vector out of them, or, where the shift is a compile-time
// constant (load_pieces), read the vector's own bytes as naturally aligned pieces; stores write
// the vector as its natural pieces (2-, 4- and 8-byte stores at their own alignment, at most
// four). Where a warp holds consecutive vectors, granules are shared between lanes by shuffles
// instead: one load and one whole store a vector (RowTile in row_engine.cuh, with bounds and
// lane groups; store_warp_vector16 for a whole warp inside a row). A vector
// funnelled as its granules load (load_vector16) waits on them before the next vector's loads
// issue: RowTile's shared-granule tiles issue every slot's load first, and load_vectors16 issues
// a batch's granules before funnelling any. The vector a thread holds is the same as for an
// aligned row, so every result keeps its bits whatever the alignment.
// Only a row's first vector and its last one or two (whose granules reach past the row) move
// element by element.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace reducekit::kernels {

struct Bytes16 {
  uint32_t w[4];
};

__device__ __forceinline__ int misalignment16(const void* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15); }

__device__ __forceinline__ Bytes16 load_aligned16(const void* p) {
  const uint4 r = *reinterpret_cast<const uint4*>(p);
  return {{r.x, r.y, r.z, r.w}};
}

// L2 cache policies (createpolicy) for loads that say how long their lines should stay: rows
// read twice keep their first read (evict_last) until the second, which lets it go
// (evict_first). The policy is a register: a kernel picks one at run time.
enum class L2Keep { kNormal, kLast, kFirst };
__device__ __forceinline__ uint64_t l2_policy(L2Keep keep) {
  uint64_t p;
  if (keep == L2Keep::kLast) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else if (keep == L2Keep::kFirst) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  else asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ Bytes16 load_aligned16(const void* p, uint64_t policy) {
  Bytes16 b;
  asm volatile("ld.global.L2::cache_hint.v4.b32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(b.w[0]), "=r"(b.w[1]), "=r"(b.w[2]), "=r"(b.w[3])
               : "l"(p), "l"(policy));
  return b;
}
// 16-byte loads as function objects, so a loader can be handed one: plain, or under a policy.
struct PlainLoad16 {
  __device__ __forceinline__ Bytes16 operator()(const void* p) const { return load_aligned16(p); }
};
struct PolicyLoad16 {
  uint64_t policy;
  __device__ __forceinline__ Bytes16 operator()(const void* p) const { return load_aligned16(p, policy); }
};

// One 16-byte global store, spelled out: left to itself the compiler splits 16-bit packs'
// stores into 4- and 2-byte pieces (seen in the block kernel's PTX).
__device__ __forceinline__ void store_aligned16(void* dst, const Bytes16& b) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(b.w[0]), "r"(b.w[1]), "r"(b.w[2]),
               "r"(b.w[3])
               : "memory");
}

// The same store without the memory clobber, so the compiler may issue later loads ahead of it:
// for output passes whose loads never read what they store (a staged row's y beside its shared
// copy of x and the parameters).
__device__ __forceinline__ void store_aligned16_unordered(void* dst, const Bytes16& b) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(b.w[0]), "r"(b.w[1]), "r"(b.w[2]),
               "r"(b.w[3]));
}

// Bytes [shift, shift + 16) of lo followed by hi; shift in [0, 16) and a multiple of
// kElemBytes. Word selects and funnel shifts, no indexing by a runtime value (that would put the
// words in local memory); elements of 4 bytes or more need the selects only.
template <int kElemBytes = 2>
__device__ __forceinline__ Bytes16 funnel16(const Bytes16& lo, const Bytes16& hi, int shift) {
  const uint32_t w[8] = {lo.w[0], lo.w[1], lo.w[2], lo.w[3], hi.w[0], hi.w[1], hi.w[2], hi.w[3]};
  const int q = shift >> 2;
  uint32_t u[5];
#pragma unroll
  for (int i = 0; i < 5; ++i) u[i] = q == 0 ? w[i] : q == 1 ? w[i + 1] : q == 2 ? w[i + 2] : w[i + 3];
  Bytes16 r;
  if constexpr (kElemBytes >= 4) {
    memcpy(&r, u, 16);
  } else {
    const unsigned bits = static_cast<unsigned>(shift & 3) * 8;
#pragma unroll
    for (int j = 0; j < 4; ++j) r.w[j] = __funnelshift_r(u[j], u[j + 1], bits);
  }
  return r;
}

// Bytes [4 kWords + bits / 8, ... + 16) of lo followed by hi: the word offset a compile-time
// constant (no selects), the bits (0, 8, 16 or 24) a funnel shift's count.
template <int kWords> __device__ __forceinline__ Bytes16 funnel16_words(const Bytes16& lo, const Bytes16& hi, unsigned bits) {
  const uint32_t w[8] = {lo.w[0], lo.w[1], lo.w[2], lo.w[3], hi.w[0], hi.w[1], hi.w[2], hi.w[3]};
  Bytes16 r;
#pragma unroll
  for (int j = 0; j < 4; ++j) r.w[j] = __funnelshift_r(w[j + kWords], w[j + kWords + 1], bits);
  return r;
}

// funnel16 at a compile-time byte offset: whole words where it falls on a word (no shifts).
template <int kOff> __device__ __forceinline__ Bytes16 funnel16_at(const Bytes16& lo, const Bytes16& hi) {
  if constexpr (kOff % 4 != 0) {
    return funnel16_words<kOff / 4>(lo, hi, kOff % 4 * 8);
  } else {
    const uint32_t w[8] = {lo.w[0], lo.w[1], lo.w[2], lo.w[3], hi.w[0], hi.w[1], hi.w[2], hi.w[3]};
    return {{w[kOff / 4], w[kOff / 4 + 1], w[kOff / 4 + 2], w[kOff / 4 + 3]}};
  }
}

// Calls f(std::integral_constant<int, shift>()): the row's byte shift (a multiple of kElemBytes in
// [0, 16)) as a compile-time constant in each branch, so the branch's funnels need no word
// selects and the shuffles of words its shift never reaches drop out. Uniform where a warp's
// lanes hold one row.
template <int kElemBytes, class F> __device__ __forceinline__ void with_shift16(int shift, F&& f) {
  using std::integral_constant;
  switch (shift) {
    case 0: f(integral_constant<int, 0>()); break;
    case 8: f(integral_constant<int, 8>()); break;
    case 4: if constexpr (kElemBytes <= 4) f(integral_constant<int, 4>()); break;
    case 12: if constexpr (kElemBytes <= 4) f(integral_constant<int, 12>()); break;
    case 2: if constexpr (kElemBytes <= 2) f(integral_constant<int, 2>()); break;
    case 6: if constexpr (kElemBytes <= 2) f(integral_constant<int, 6>()); break;
    case 10: if constexpr (kElemBytes <= 2) f(integral_constant<int, 10>()); break;
    case 14: if constexpr (kElemBytes <= 2) f(integral_constant<int, 14>()); break;
    default: break;  // not a multiple of the element size: no such pointer
  }
}

// Lane `lane` of a `width`-lane group holding consecutive vectors of one row at byte shift kShift:
// its vector, bytes [kShift, kShift + 16) of its floor granule `lo` and the next granule, whose
// words come from the right neighbour's `lo` (the group's last lane takes them from `past`, word
// w held by lane w: the granule past the group). Only the words the shift reaches are shuffled.
// Every lane of the group calls it.
template <int kShift>
__device__ __forceinline__ Bytes16 shared_granule_vector(const Bytes16& lo, uint32_t past, int lane, int width) {
  if constexpr (kShift == 0) {
    return lo;
  } else {
    Bytes16 hi{};
#pragma unroll
    for (int w = 0; w < (kShift + 3) / 4; ++w) {
      const uint32_t next = __shfl_down_sync(0xffffffffu, lo.w[w], 1, width);
      const uint32_t tail = __shfl_sync(0xffffffffu, past, w, width);
      hi.w[w] = lane == width - 1 ? tail : next;
    }
    return funnel16_at<kShift>(lo, hi);
  }
}

namespace detail {
template <int kShift, int kPos> __device__ __forceinline__ void load_words(const char* base, Bytes16& r) {
  if constexpr (kPos < kShift + 16) {
    constexpr int J = (kPos - kShift) / 4;
    if constexpr (kPos % 8 == 0 && kPos + 8 <= kShift + 16) {
      const uint2 v = *reinterpret_cast<const uint2*>(base + kPos);
      r.w[J] = v.x;
      r.w[J + 1] = v.y;
      load_words<kShift, kPos + 8>(base, r);
    } else {
      r.w[J] = *reinterpret_cast<const uint32_t*>(base + kPos);
      load_words<kShift, kPos + 4>(base, r);
    }
  }
}
}  // namespace detail

// Bytes [kShift, kShift + 16) of the granules at base (kShift a multiple of 4) as naturally
// aligned 8- and 4-byte loads: only the vector's own bytes are read, and its registers hold
// only its own words (two whole granules would hold twice as many while in flight).
template <int kShift> __device__ __forceinline__ Bytes16 load_pieces(const char* base) {
  static_assert(kShift > 0 && kShift < 16 && kShift % 4 == 0, "word-aligned shifts");
  Bytes16 r;
  detail::load_words<kShift, kShift>(base, r);
  return r;
}

// The VEC elements of `row` from e0 (a multiple of VEC, e0 + VEC <= len), for a row of `len`
// elements at any alignment. Nothing outside the row is read.
template <typename T, int VEC, typename Index, class Load = PlainLoad16>
__device__ __forceinline__ Bytes16 load_vector16(const T* row, Index e0, Index len, Load load = {}) {
  static_assert(sizeof(T) * VEC == 16, "vectors are 16 bytes");
  const int shift = misalignment16(row);
  if (shift == 0) return load(row + e0);
  // Both granules inside the row: past its first vector and short of its end.
  if (e0 >= VEC && e0 + 2 * VEC - shift / static_cast<int>(sizeof(T)) <= len) {
    const char* granule = reinterpret_cast<const char*>(row + e0) - shift;
    return funnel16(load(granule), load(granule + 16), shift);
  }
  T v[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) v[e] = row[e0 + e];
  Bytes16 b;
  memcpy(&b, v, 16);
  return b;
}

// N vectors at once, the n-th the VEC elements of rows[n] from e0[n] (each as load_vector16 takes
// it), every granule issued before the first funnel: a run of load_vector16 calls waits on each
// vector's two loads before the next vector's are issued. Twice the registers a vector instead.
template <typename T, int VEC, int N, typename Index>
__device__ __forceinline__ void load_vectors16(const T* const (&rows)[N], const Index (&e0)[N], Index len,
                                               Bytes16 (&out)[N]) {
  static_assert(sizeof(T) * VEC == 16, "vectors are 16 bytes");
  bool funnel[N];  // shifted, both granules inside the row
  Bytes16 hi[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int shift = misalignment16(rows[n]);
    const char* granule = reinterpret_cast<const char*>(rows[n] + e0[n]) - shift;
    funnel[n] = shift != 0 && e0[n] >= VEC && e0[n] + 2 * VEC - shift / static_cast<int>(sizeof(T)) <= len;
    if (shift == 0 || funnel[n]) out[n] = load_aligned16(granule);
    if (funnel[n]) hi[n] = load_aligned16(granule + 16);
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (funnel[n]) {
      out[n] = funnel16(out[n], hi[n], misalignment16(rows[n]));
    } else if (misalignment16(rows[n]) != 0) {
      T v[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = rows[n][e0[n] + e];
      memcpy(&out[n], v, 16);
    }
  }
}

namespace detail {

// Bytes [J, J + N) of b as one value of N bytes (J even: element sizes are 2, 4 or 8).
template <int J> __device__ __forceinline__ uint32_t word_at(const Bytes16& b) {
  if constexpr (J % 4 == 0) return b.w[J / 4];
  else return __funnelshift_r(b.w[J / 4], b.w[J / 4 + 1], 16);
}

// Writes bytes [kPos - kShift, kEnd - kShift) of b to base + kPos .. base + kEnd as naturally
// aligned pieces (byte j of b belongs at base + kShift + j).
template <int kShift, int kPos, int kEnd = kShift + 16>
__device__ __forceinline__ void store_pieces(char* base, const Bytes16& b) {
  if constexpr (kPos < kEnd) {
    constexpr int kSize = kPos % 8 == 0 && kPos + 8 <= kEnd ? 8 : kPos % 4 == 0 && kPos + 4 <= kEnd ? 4 : 2;
    constexpr int J = kPos - kShift;
    if constexpr (kSize == 8) {
      *reinterpret_cast<uint2*>(base + kPos) = make_uint2(word_at<J>(b), word_at<J + 4>(b));
    } else if constexpr (kSize == 4) {
      *reinterpret_cast<uint32_t*>(base + kPos) = word_at<J>(b);
    } else {
      const uint32_t w = b.w[J / 4] >> (J % 4 * 8);
      *reinterpret_cast<uint16_t*>(base + kPos) = static_cast<uint16_t>(w);
    }
    store_pieces<kShift, kPos + kSize, kEnd>(base, b);
  }
}

// The vector's bytes in its floor granule (head: [kShift, 16)) and in the next (tail: the rest).
template <int kShift> __device__ __forceinline__ void store_shifted(char* base, const Bytes16& b, bool head, bool tail) {
  if (head) store_pieces<kShift, kShift, 16>(base, b);
  if (tail) store_pieces<kShift, 16, kShift + 16>(base, b);
}

// A warp's vectors at shift kShift (lane l's vector b from base + kShift + 16 l): lane l < 31
// writes the granule after its floor one whole (its tail, lane l + 1's head); lane 0 its head
// and lane 31 its tail as pieces.
template <int kShift> __device__ __forceinline__ void store_warp_shifted(char* base, const Bytes16& b) {
  const int lane = threadIdx.x % 32;
  Bytes16 next;
#pragma unroll
  for (int w = 0; w < 4; ++w) next.w[w] = __shfl_down_sync(0xffffffffu, b.w[w], 1);
  if (lane != 31) store_aligned16(base + 16, funnel16_at<16 - kShift>(b, next));
  store_shifted<kShift>(base, b, lane == 0, lane == 31);
}

}  // namespace detail

// Writes 16 bytes to dst, aligned to kElemBytes (2, 4 or 8): one store when dst is 16-byte
// aligned, else its natural pieces, the part in dst's floor granule (head) and the part in the
// next (tail) as asked. The shift is the row's, so the branch is uniform over a row.
template <int kElemBytes>
__device__ __forceinline__ void store_vector16(void* dst, const Bytes16& b, bool head = true, bool tail = true) {
  const int shift = misalignment16(dst);
  char* base = static_cast<char*>(dst) - shift;
  with_shift16<kElemBytes>(shift, [&](auto s) {
    if constexpr (decltype(s)::value == 0) store_aligned16(dst, b);
    else detail::store_shifted<decltype(s)::value>(base, b, head, tail);
  });
}

// store_vector16 for a whole warp's 32 consecutive vectors (lane l's at dst + 16 l bytes, every
// lane calling it): a shifted warp's granules go out whole, each from a lane's tail and its right
// neighbour's head (a shuffle), only the warp's first head and last tail as pieces. A shifted
// 16-bit vector is up to four stores a lane, each over a warp's 16 sectors; this is one.
template <int kElemBytes> __device__ __forceinline__ void store_warp_vector16(void* dst, const Bytes16& b) {
  const int shift = misalignment16(dst);
  char* base = static_cast<char*>(dst) - shift;
  with_shift16<kElemBytes>(shift, [&](auto s) {
    if constexpr (decltype(s)::value == 0) store_aligned16(dst, b);
    else detail::store_warp_shifted<decltype(s)::value>(base, b);
  });
}

}  // namespace reducekit::kernels
