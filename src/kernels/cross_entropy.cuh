// SPDX-License-Identifier: Apache-2.0
// Cross-entropy kernels (include/reducekit/loss.hpp): one CTA a row, CTAs looping over rows;
// rows of the staged bands (16-bit and float32, by bytes) also on staged rows
// (cross_entropy_staged_kernel), which can write the gradient in the same pass.
//
// Forward: each thread folds its 16-byte vectors of the row (vectors tid, tid + threads, ...,
// kCrossEntropyUnroll loads in flight, the next step's beside) into softmax's (max, sum of exp)
// statistic and, with label smoothing, into sum_j w[j] z[j]; the CTA merges them in a fixed order
// (butterflies, then the warps in order: block_butterfly_reduce), and thread 0 writes the row's
// loss and logsumexp. Backward: each element's gradient from its row's saved logsumexp, target
// and upstream gradient; no reduction.
// A thread's fold restarts at each chunk of the row (chunk_vectors: kCrossEntropyChunks at most,
// a function of the row length and dtype alone) and merges the chunks' statistics in order, so
// a row cut over a cluster's CTAs (cross_entropy_split_forward_kernel, for batches of too few
// rows to fill the device) folds the same values in the same order as one CTA looping over it.
// Rows at any alignment move as shifted 16-byte vectors (vector_io.cuh; float32 rows a launch
// per shift class, the shift a compile-time constant: each vector's own bytes as aligned pieces);
// the thread-to-element layout depends on the row length alone, so a row's results do not
// depend on the batch or the alignment.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/numeric.cuh"
#include "kernels/row_engine.cuh"
#include "kernels/row_staged.cuh"
#include "kernels/softmax_ops.cuh"
#include "kernels/vector_io.cuh"
#include "plan/cross_entropy_plan.hpp"

namespace reducekit::kernels {

// kCrossEntropyThreads, kCrossEntropyUnroll, the chunks of a split row: plan/cross_entropy_plan.hpp.
// The lean 16-bit forward at 64 registers: four CTAs an SM (at 65-72, three).
constexpr int kCrossEntropyLeanCtasPerSm = 4;

template <typename T> struct CrossEntropyArgs {
  using Acc = acc_t<T>;
  const T* logits;
  int64_t logits_stride;
  const int64_t* target;
  const Acc* weight;  // [classes], or null (every class weighs 1)
  int64_t rows;
  int64_t classes;
  int64_t ignore_index;
  Acc smoothing;  // label smoothing
  Acc z_scale;    // lse_square_scale
  Acc softcap;    // 0: none
  Acc* loss;      // forward: [rows]
  Acc* lse;       // forward: [rows]
  const Acc* saved_lse;  // backward: [rows]
  const Acc* grad;       // backward: [rows], or one value for every row
  int64_t grad_stride;   // 1, or 0 where one value serves every row
  T* dlogits;            // backward
  int64_t dlogits_stride;
  __device__ __forceinline__ Acc grad_of(int64_t row) const { return grad[row * grad_stride]; }
};

template <typename Acc> __device__ __forceinline__ Acc soft_capped(Acc x, Acc softcap) {
  return softcap > Acc(0) ? softcap * tanh(x / softcap) : x;
}

// Vector v of a row of `len` elements as raw bytes. A vector reaching past the row is read
// element by element, inside the row only (its missing elements zero); values_of masks them.
// kShift: the row's misalignment16 where the launch knows it (a shift class), -1 where not.
template <typename T, int VEC, int kShift>
__device__ __forceinline__ Bytes16 load_row_vector(const T* row, int64_t v, int64_t len) {
  const int64_t e0 = v * VEC;
  if (e0 + VEC <= len) {
    if constexpr (kShift < 0) {
      return load_vector16<T, VEC>(row, e0, len);
    } else if constexpr (kShift == 0) {
      return load_aligned16(row + e0);
    } else {
      // The shift a constant: the vector's own words, as aligned pieces.
      return load_pieces<kShift>(reinterpret_cast<const char*>(row + e0) - kShift);
    }
  }
  T part[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) part[e] = e0 + e < len ? row[e0 + e] : from_acc<T>(acc_t<T>(0));
  Bytes16 b;
  memcpy(&b, part, 16);
  return b;
}

// A row in the 16-byte granules counted from the 512-byte block it starts in (a warp's 32
// granules: each warp's step then covers whole 32-byte sectors): the row starts `shift` elements
// into the block, so granule k holds its elements k * VEC - shift .. k * VEC - shift + VEC - 1.
// Every granule but a partial first and last lies whole inside the row or wholly before it: an
// aligned 16 bytes to load and store at any row length (granules before the row touch nothing).
template <int VEC> struct RowGranules {
  static constexpr int kBlockBytes = 512;
  int shift;
  int64_t count, first_whole, end_whole;  // granules [first_whole, end_whole) lie whole inside
  template <typename T>
  __device__ __forceinline__ RowGranules(const T* row, int64_t len)
      : shift(static_cast<int>(reinterpret_cast<uintptr_t>(row) % kBlockBytes) / static_cast<int>(sizeof(T))),
        count((len + shift + VEC - 1) / VEC), first_whole((shift + VEC - 1) / VEC), end_whole((len + shift) / VEC) {}
  __device__ __forceinline__ bool whole(int64_t k) const { return k >= first_whole && k < end_whole; }
  __device__ __forceinline__ int64_t first_element(int64_t k) const { return k * VEC - shift; }
};

// Granule k of `row` (its elements from first_element(k)): one aligned load where whole, else
// element by element, inside the row only (zeros elsewhere).
template <typename T, int VEC>
__device__ __forceinline__ Bytes16 load_row_granule(const T* row, const RowGranules<VEC>& g, int64_t k, int64_t len) {
  const int64_t e0 = g.first_element(k);
  if (g.whole(k)) return load_aligned16(row + e0);
  T part[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    part[e] = uint64_t(e0 + e) < uint64_t(len) ? row[e0 + e] : from_acc<T>(acc_t<T>(0));
  Bytes16 b;
  memcpy(&b, part, 16);
  return b;
}

// Writes out[] to `row` from element e0: one 16-byte store where `whole` (kAligned: at an aligned
// address; else at any), else the elements inside the row one by one.
template <bool kAligned, typename T, int VEC>
__device__ __forceinline__ void store_row_elements(T* row, int64_t e0, bool whole, const T (&out)[VEC], int64_t len) {
  if (whole) {
    Bytes16 b;
    memcpy(&b, out, 16);
    if constexpr (kAligned) store_aligned16(row + e0, b);
    else store_vector16<sizeof(T)>(row + e0, b);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (uint64_t(e0 + e) < uint64_t(len)) row[e0 + e] = out[e];
  }
}

// The (soft-capped) logits of a vector inside the row.
template <typename T, int VEC, typename Acc>
__device__ __forceinline__ void values_whole(const Bytes16& b, Acc softcap, Acc* z) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && std::is_same_v<Acc, float>) {
    // A word's two bfloat16 values are the high halves of two floats: one shift or mask each
    // (a conversion each took an extract and a shift for the upper one); the same values.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      z[2 * k] = soft_capped(__uint_as_float(b.w[k] << 16), softcap);
      z[2 * k + 1] = soft_capped(__uint_as_float(b.w[k] & 0xffff0000u), softcap);
    }
  } else {
    T raw[VEC];
    memcpy(raw, &b, 16);
#pragma unroll
    for (int e = 0; e < VEC; ++e) z[e] = soft_capped(to_acc<Acc>(raw[e]), softcap);
  }
}

// The (soft-capped) logits of vector v, elements past the row's end replaced by `pad`.
template <typename T, int VEC, typename Acc>
__device__ __forceinline__ void values_of(const Bytes16& b, int64_t v, int64_t len, Acc softcap, Acc pad,
                                          Acc* z) {
  T raw[VEC];
  memcpy(raw, &b, 16);
  const int64_t e0 = v * VEC;
  const bool full = e0 + VEC <= len;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    z[e] = soft_capped(to_acc<Acc>(raw[e]), softcap);
    if (!full && e0 + e >= len) z[e] = pad;
  }
}

// The U vectors a thread takes in one step: v0, v0 + threads, ...
template <typename T, int U = kCrossEntropyUnroll> struct VectorBatch {
  static constexpr int VEC = 16 / sizeof(T);
  Bytes16 raw[U];
  template <int kShift> __device__ __forceinline__ void load(const T* row, int64_t v0, int64_t vectors, int64_t len) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t v = v0 + int64_t(u) * blockDim.x;
      if (v < vectors) raw[u] = load_row_vector<T, VEC, kShift>(row, v, len);
    }
  }
  // The step from v0 lies inside the row: its last vector is whole.
  __device__ __forceinline__ static bool whole_step(int64_t v0, int64_t whole_vectors) {
    return v0 + int64_t(U - 1) * blockDim.x < whole_vectors;
  }
  // The step from v0 lies past the row's first vector and a vector short of its end, so a shifted
  // vector's two granules lie inside the row too (load_vector16's funnel case for each).
  __device__ __forceinline__ static bool inside_step(int64_t v0, int64_t whole_vectors) {
    return v0 > 0 && v0 + int64_t(U - 1) * kCrossEntropyThreads + 2 <= whole_vectors;
  }
  // inside_step for every lane of the thread's warp (whose lanes hold consecutive vectors), so
  // the whole warp takes the step together: load_inside_shared's shuffles need it.
  __device__ __forceinline__ static bool warp_inside_step(int64_t v0, int64_t whole_vectors) {
    const int64_t warp_first = v0 - threadIdx.x % 32;
    return inside_step(warp_first, whole_vectors) && inside_step(warp_first + 31, whole_vectors);
  }
  // An inside step's vectors (CTAs of kCrossEntropyThreads): one address a step, the vectors'
  // offsets immediates, the row's shift tested once a step; the bytes load() reads.
  template <int kShift> __device__ __forceinline__ void load_inside(const T* row, int64_t v0) {
    constexpr int kStride = kCrossEntropyThreads * 16;
    const char* p = reinterpret_cast<const char*>(row + v0 * VEC);
    if constexpr (kShift == 0) {
#pragma unroll
      for (int u = 0; u < U; ++u) raw[u] = load_aligned16(p + u * kStride);
    } else if constexpr (kShift > 0) {
#pragma unroll
      for (int u = 0; u < U; ++u) raw[u] = load_pieces<kShift>(p + u * kStride - kShift);
    } else {
      const int shift = misalignment16(row);
      if (shift == 0) {
#pragma unroll
        for (int u = 0; u < U; ++u) raw[u] = load_aligned16(p + u * kStride);
      } else {
        // The shift's word offset as a constant (one branch a step), its bytes as a funnel's count
        switch (shift >> 2) {
          case 0: load_funnelled<0>(p - shift, shift); break;
          case 1: load_funnelled<1>(p - shift, shift); break;
          case 2: load_funnelled<2>(p - shift, shift); break;
          default: load_funnelled<3>(p - shift, shift); break;
        }
      }
    }
  }
  // load_inside<-1> for a warp_inside_step with each granule read once a warp, not twice: a
  // lane's second granule is its right neighbour's first (a shuffle), the warp's last lane loads
  // its own. Two stages, so that every input's loads issue before a shuffle waits on one:
  // load_granules, then share_granules (`tail`: the last lane's second granules).
  __device__ __forceinline__ void load_granules(const T* row, int64_t v0, Bytes16 (&tail)[U]) {
    constexpr int kStride = kCrossEntropyThreads * 16;
    const int shift = misalignment16(row);
    const char* g = reinterpret_cast<const char*>(row + v0 * VEC) - shift;
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = load_aligned16(g + u * kStride);
    if (shift != 0 && threadIdx.x % 32 == 31) {
#pragma unroll
      for (int u = 0; u < U; ++u) tail[u] = load_aligned16(g + u * kStride + 16);
    }
  }
  __device__ __forceinline__ void share_granules(const T* row, const Bytes16 (&tail)[U]) {
    const int shift = misalignment16(row);
    switch (shift >> 2) {  // the word offset as a constant, the bytes as a funnel's count
      case 0: if (shift != 0) funnel_shared<0>(tail, shift); break;
      case 1: funnel_shared<1>(tail, shift); break;
      case 2: funnel_shared<2>(tail, shift); break;
      default: funnel_shared<3>(tail, shift); break;
    }
  }
  template <int kWords> __device__ __forceinline__ void funnel_shared(const Bytes16 (&tail)[U], int shift) {
    const unsigned bits = static_cast<unsigned>(shift & 3) * 8;
    const bool last_lane = threadIdx.x % 32 == 31;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      Bytes16 hi = {};  // the funnel reads its words 0 .. kWords only
#pragma unroll
      for (int w = 0; w <= kWords; ++w) {
        const uint32_t next = __shfl_down_sync(0xffffffffu, raw[u].w[w], 1);  // every lane, then a select
        hi.w[w] = last_lane ? tail[u].w[w] : next;
      }
      raw[u] = funnel16_words<kWords>(raw[u], hi, bits);
    }
  }
  // Each vector out of its two granules from g, the shift's word offset kWords known.
  template <int kWords> __device__ __forceinline__ void load_funnelled(const char* g, int shift) {
    constexpr int kStride = kCrossEntropyThreads * 16;
    const unsigned bits = static_cast<unsigned>(shift & 3) * 8;
#pragma unroll
    for (int u = 0; u < U; ++u)
      raw[u] = funnel16_words<kWords>(load_aligned16(g + u * kStride), load_aligned16(g + u * kStride + 16), bits);
  }
};

// sum_j w[j] over the classes, the same for every row: once a CTA, where the smoothing term needs it.
template <typename Acc>
__device__ __forceinline__ Acc class_weight_sum(const Acc* weight, int64_t classes, StatVec<Acc, 1>* slots) {
  if (weight == nullptr) return Acc(classes);
  Acc s = Acc(0);
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += weight[j];
  return block_butterfly_reduce<RowSum<Acc>>({{s}}, slots).w[0];
}

// One row's forward: a thread folds each step's U vectors into its (max, sum of exp(z - max)) at
// once, the step's max first, so a step costs one exp an element and one rescale; the next step's
// loads are in flight meanwhile. The target's logit is read at the row's start, off the critical
// path. Thread 0 writes the row's loss and lse.
template <typename T, bool kExtras> struct CrossEntropyRow {
  using Acc = acc_t<T>;
  using Lse = SoftmaxForwardOp<T, false>;  // its (max, sum of exp) statistic and merge
  static constexpr int VEC = 16 / sizeof(T), U = kCrossEntropyUnroll;
  // Inside steps load from one address a step (VectorBatch::load_inside) where that costs no CTA
  // an SM: the float32 kernel reading each row's shift went 63 -> 65 registers with it.
  template <int kShift> static constexpr bool kInsideLoads = sizeof(T) == 2 || kShift >= 0;
  // A thread's fold of its vectors: softmax's statistic and, with label smoothing, sum_j w[j] z[j].
  struct Fold {
    typename Lse::Stat stat;
    Acc wz;
  };
  typename Lse::Stat* lse_slots;   // 33 each, shared
  StatVec<Acc, 1>* sum_slots;
  Fold* parked;                    // a thread's finished chunks, shared (forward only)
  CrossEntropyArgs<T> a;
  bool smooth;
  Acc softcap, weight_sum;
  int64_t vectors, step, chunk_vectors;
  int chunk_steps;

  // needs_weight_sum: false where the CTA writes no loss and no gradient (a split row's later chunks).
  __device__ __forceinline__ CrossEntropyRow(const CrossEntropyArgs<T>& args, typename Lse::Stat* lse_s,
                                             StatVec<Acc, 1>* sum_s, Fold* parked_folds,
                                             bool needs_weight_sum = true)
      : lse_slots(lse_s), sum_slots(sum_s), parked(parked_folds), a(args) {
    smooth = kExtras && a.smoothing > Acc(0);
    softcap = kExtras ? a.softcap : Acc(0);
    weight_sum = smooth && needs_weight_sum ? class_weight_sum(a.weight, a.classes, sum_slots) : Acc(0);
    vectors = (a.classes + VEC - 1) / VEC;
    step = int64_t(U) * blockDim.x;
    chunk_vectors = cross_entropy_chunk_vectors(vectors);
    chunk_steps = static_cast<int>(chunk_vectors / step);
  }

  // Thread 0 reads the row's target and its logit (the others keep 0).
  __device__ __forceinline__ void read_target(int64_t row, int64_t* t, T* target_logit) const {
    *t = 0;
    *target_logit = from_acc<T>(Acc(0));
    if (threadIdx.x == 0) {
      *t = a.target[row];
      if (*t >= 0 && *t < a.classes) *target_logit = a.logits[row * a.logits_stride + *t];
    }
  }

  // The thread's fold of the row's vectors from chunk start v_begin up to v_end (the row's end,
  // or the chunk's), restarted at each chunk start and merged chunk by chunk in order.
  // kShift: the row's misalignment16 where every row of the launch shares it, or -1 (read at run time).
  // The finished chunks wait in shared memory, off the loop's registers (the lean 16-bit kernel
  // has none to spare).
  template <int kShift> __device__ __forceinline__ Fold fold(const T* x, int64_t v_begin, int64_t v_end) const {
    Fold& done = parked[threadIdx.x];
    done = {Lse::identity(), Acc(0)};
    int chunk_step = 0;
    Acc m = negative_infinity<Acc>(), s = Acc(0);
    Acc wz = Acc(0);  // sum_j w[j] z[j], smoothing only
    // The lean 16-bit kernel's steps inside the row (all but a thread's last) convert with no test
    // an element, which cost a third of its loop's instructions; the same values. float32 rows,
    // whose loop issues half as many conversions a byte, did not gain from them.
    constexpr bool kWholeSteps = !kExtras && sizeof(T) == 2;
    const int64_t whole_vectors = a.classes / VEC;
    using Batch = VectorBatch<T>;
    Batch cur, next;
    cur.template load<kShift>(x, v_begin + threadIdx.x, vectors, a.classes);
    for (int64_t v0 = v_begin + threadIdx.x; v0 < v_end; v0 += step) {
      if (chunk_step == chunk_steps) {  // chunks are whole steps: a step never straddles two
        done.stat = Lse::merge(done.stat, {{m, s}});
        done.wz += wz;
        m = negative_infinity<Acc>();
        s = wz = Acc(0);
        chunk_step = 0;
      }
      ++chunk_step;
      if (v0 + step < v_end) {
        if (kInsideLoads<kShift> && Batch::inside_step(v0 + step, whole_vectors)) {
          next.template load_inside<kShift>(x, v0 + step);
        } else {
          next.template load<kShift>(x, v0 + step, vectors, a.classes);
        }
      }
      Acc z[U * VEC];
      if (kWholeSteps && Batch::whole_step(v0, whole_vectors)) {
#pragma unroll
        for (int u = 0; u < U; ++u) values_whole<T, VEC>(cur.raw[u], softcap, z + u * VEC);
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u)
          values_of<T, VEC>(cur.raw[u], v0 + int64_t(u) * blockDim.x, a.classes, softcap, negative_infinity<Acc>(),
                            z + u * VEC);
      }
      // fmax skips NaN, the sum catches it; an all -inf max subtracts 0 so -inf gives exp = 0.
      const Acc top = fmax(m, fold_chains<U * VEC>(Max{}, [&](int i) { return z[i]; }));
      const Acc base = top == negative_infinity<Acc>() ? Acc(0) : top;
      s = s * fast_exp(m - base) + fold_chains<U * VEC>(Plus{}, [&](int i) { return fast_exp(z[i] - base); });
      m = top;
      if (smooth) {
#pragma unroll
        for (int i = 0; i < U * VEC; ++i) {
          const int64_t j = (v0 + int64_t(i / VEC) * blockDim.x) * VEC + i % VEC;
          if (j < a.classes) wz += (a.weight ? a.weight[j] : Acc(1)) * z[i];
        }
      }
      cur = next;
    }
    // Merging into the identity gives the operand's bits, so a chunk folded alone (a split row's)
    // and one merged here agree.
    Fold f = done;
    f.stat = Lse::merge(f.stat, {{m, s}});
    f.wz += wz;
    return f;
  }

  // The CTA's merge of its threads' folds of the whole row; thread 0 writes the row's loss and lse.
  __device__ __forceinline__ void finish(int64_t row, const Fold& f, int64_t t, T target_logit) const {
    const typename Lse::Stat stat = block_butterfly_reduce<Lse>(f.stat, lse_slots);
    const Acc wz = smooth ? block_butterfly_reduce<RowSum<Acc>>({{f.wz}}, sum_slots).w[0] : Acc(0);
    const Acc log_sum = precise_log(stat.w[1]);
    const Acc lse = stat.w[0] + log_sum;  // -inf for an all -inf row
    if (threadIdx.x == 0) {
      Acc loss = Acc(0);
      if (t != a.ignore_index) {
        if (t < 0 || t >= a.classes) {
          loss = Acc(NAN);  // read nothing out of bounds; the row's loss says the target was bad
        } else {
          const Acc zt = soft_capped(to_acc<Acc>(target_logit), softcap);
          // lse - z_t as (max - z_t) + log(sum): lse is rounded at its own magnitude (float32 at
          // 6560: 2.4e-4 a half unit), which lse - z_t would keep however small the loss (0.0136
          // came out 1.07e-4 off); max - z_t is exact where the two are close, as in torch's
          // log_softmax. NaN and inf come out as before (an all -inf row: max - z_t is NaN).
          loss = (Acc(1) - a.smoothing) * (a.weight ? a.weight[t] : Acc(1)) * ((stat.w[0] - zt) + log_sum);
          if (smooth) loss += a.smoothing / Acc(a.classes) * (weight_sum * lse - wz);
          if (a.z_scale != Acc(0)) loss += a.z_scale * lse * lse;
        }
      }
      a.loss[row] = loss;
      a.lse[row] = lse;
    }
  }

  template <int kShift> __device__ __forceinline__ void forward(int64_t row) const {
    int64_t t;
    T target_logit;
    read_target(row, &t, &target_logit);
    finish(row, fold<kShift>(a.logits + row * a.logits_stride, 0, vectors), t, target_logit);
  }

  // A row's gradient terms: d loss / d z_j = p_j * (target + smooth * W + 2 s g lse) - target [j == t]
  // - smooth * w[j], with target = g (1 - ls) w[t], smooth = g ls / classes, W = sum_j w[j],
  // p_j = exp(z_j - lse); rows without a target in range take `fill` (ignored: 0, bad: NaN).
  struct GradientTerms {
    int64_t t;
    bool live;
    Acc lse, target_part, smooth_part, p_factor, fill;
  };
  __device__ __forceinline__ GradientTerms gradient_terms(int64_t row, Acc lse, Acc g) const {
    GradientTerms r;
    r.t = a.target[row];
    const bool ignored = r.t == a.ignore_index, bad = !ignored && (r.t < 0 || r.t >= a.classes);
    r.live = !ignored && !bad;
    r.lse = lse;
    r.target_part = r.live ? g * (Acc(1) - a.smoothing) * (a.weight ? a.weight[r.t] : Acc(1)) : Acc(0);
    r.smooth_part = g * a.smoothing / Acc(a.classes);
    r.p_factor = r.target_part + r.smooth_part * weight_sum + Acc(2) * a.z_scale * g * lse;
    r.fill = bad ? Acc(NAN) : Acc(0);
    return r;
  }
  // Element j's gradient from its (soft-capped) logit z; j may lie outside the row (an element
  // that is not stored): no weight is read there.
  __device__ __forceinline__ Acc element_gradient(const GradientTerms& r, Acc z, bool is_target, int64_t j) const {
    Acc d = r.fill;
    if (r.live) {
      d = fast_exp(z - r.lse) * r.p_factor;
      if (is_target) d -= r.target_part;
      if (smooth)
        d -= r.smooth_part * (a.weight ? (uint64_t(j) < uint64_t(a.classes) ? a.weight[j] : Acc(0)) : Acc(1));
      if constexpr (kExtras)
        if (softcap > Acc(0)) d *= Acc(1) - (z / softcap) * (z / softcap);
    }
    return d;
  }

  // dlogits of the row from its lse and upstream gradient g, the vectors in the fold's layout
  // (for dlogits rows at other offsets in a granule than the logits rows, and split rows' chunks).
  // Each thread reads and then writes only its own vectors, so dlogits may be the logits themselves.
  // A warp's step wholly inside the row stores whole granules (store_warp_vector16); the others,
  // and float64 rows (ptxas spilled 16 B on the warp stores), store each vector as its naturally
  // aligned pieces. Vectors [v_begin, v_end) of the row: all of it, or one chunk of a split row
  // (whose steps are the fold's: a step never straddles two chunks).
  template <int kShift>
  __device__ __forceinline__ void gradient(int64_t row, Acc lse, Acc g, int64_t v_begin, int64_t v_end) const {
    const T* x = a.logits + row * a.logits_stride;
    T* dx = a.dlogits + row * a.dlogits_stride;
    const GradientTerms r = gradient_terms(row, lse, g);
    const int64_t gstep = int64_t(U) * blockDim.x;
    using Batch = VectorBatch<T>;
    // A warp's step whose vectors all lie whole inside [v_begin, v_end) stores through
    // store_warp_vector16 (every lane in it, the lanes' vectors consecutive).
    const int64_t whole_vectors = a.classes / VEC, whole_end = min(whole_vectors, v_end);
    const int64_t warp_last = int64_t(31 - threadIdx.x % 32) + int64_t(U - 1) * blockDim.x;
    Batch cur, next;
    cur.template load<kShift>(x, v_begin + threadIdx.x, vectors, a.classes);
    for (int64_t v0 = v_begin + threadIdx.x; v0 < v_end; v0 += gstep) {
      const bool warp_whole = v0 + warp_last < whole_end;
      if (v0 + gstep < v_end) {
        if (kInsideLoads<kShift> && Batch::inside_step(v0 + gstep, whole_vectors)) {
          next.template load_inside<kShift>(x, v0 + gstep);
        } else {
          next.template load<kShift>(x, v0 + gstep, vectors, a.classes);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t v = v0 + int64_t(u) * blockDim.x;
        if (v >= vectors) break;
        const int64_t e0 = v * VEC;
        Acc z[VEC];
        values_of<T, VEC>(cur.raw[u], v, a.classes, softcap, Acc(0), z);
        // The target's place in this vector (out of [0, VEC) where it is elsewhere): a 32-bit
        // test an element, not a 64-bit one (float64 keeps its own: ptxas spilled 32 B on this).
        const int64_t t_at = r.t - e0;
        const int t_here = t_at >= 0 && t_at < VEC ? static_cast<int>(t_at) : -1;
        T out[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          out[e] = from_acc<T>(element_gradient(r, z[e], sizeof(T) == 8 ? e0 + e == r.t : e == t_here, e0 + e));
        if (e0 + VEC <= a.classes) {
          Bytes16 b;
          memcpy(&b, out, 16);
          if (sizeof(T) <= 4 && warp_whole) store_warp_vector16<sizeof(T)>(dx + e0, b);
          else store_vector16<sizeof(T)>(dx + e0, b);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            if (e0 + e < a.classes) dx[e0 + e] = out[e];
        }
      }
      cur = next;
    }
  }

  // dlogits of a row whose dlogits row starts at its logits row's offset in a 16-byte granule:
  // the threads take the granules the row touches (RowGranules), aligned 16-byte loads and stores
  // at any row length, the partial first and last granules element by element (the neighbouring
  // rows' CTAs own their other bytes). The gradient is elementwise, so its bits are gradient()'s;
  // dlogits may be the logits themselves.
  __device__ __forceinline__ void gradient_granules(int64_t row, Acc lse, Acc g) const {
    const T* x = a.logits + row * a.logits_stride;
    T* dx = a.dlogits + row * a.dlogits_stride;
    const RowGranules<VEC> rg(x, a.classes);
    const GradientTerms r = gradient_terms(row, lse, g);
    constexpr int kStride = kCrossEntropyThreads * VEC;  // elements between a thread's granules in a step
    const auto load = [&](Bytes16 (&raw)[U], int64_t k0) {
      if (rg.whole(k0) && rg.whole(k0 + int64_t(U - 1) * kCrossEntropyThreads)) {
        const T* first = x + rg.first_element(k0);
#pragma unroll
        for (int u = 0; u < U; ++u) raw[u] = load_aligned16(first + u * kStride);
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (const int64_t k = k0 + int64_t(u) * kCrossEntropyThreads; k < rg.count)
            raw[u] = load_row_granule(x, rg, k, a.classes);
      }
    };
    const int64_t step = int64_t(U) * kCrossEntropyThreads;
    Bytes16 cur[U], next[U];
    load(cur, threadIdx.x);
    for (int64_t k0 = threadIdx.x; k0 < rg.count; k0 += step) {
      if (k0 + step < rg.count) load(next, k0 + step);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = k0 + int64_t(u) * kCrossEntropyThreads;
        if (k >= rg.count) break;
        const int64_t e0 = rg.first_element(k);
        Acc z[VEC];
        values_whole<T, VEC>(cur[u], softcap, z);
        const int64_t t_at = r.t - e0;  // the target's place in this granule
        const int t_here = t_at >= 0 && t_at < VEC ? static_cast<int>(t_at) : -1;
        T out[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = from_acc<T>(element_gradient(r, z[e], e == t_here, e0 + e));
        store_row_elements<true>(dx, e0, rg.whole(k), out, a.classes);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) cur[u] = next[u];
    }
  }
};

// Rows first_row + k * row_period (a shift class: rows that start at the same offset in a
// 16-byte granule; first_row 0 and row_period 1: every row), the CTAs taking them in turn.
template <class Body>
__device__ __forceinline__ void for_rows(int64_t rows, int64_t first_row, int row_period, Body body) {
  const int64_t step = int64_t(row_period) * gridDim.x;
  for (int64_t row = first_row + int64_t(row_period) * blockIdx.x; row < rows; row += step) body(row);
}

// kExtras: label smoothing or soft-capping in use; without them the kernels are lean enough for
// more CTAs an SM. kShift: the misalignment16 of every row the launch takes, or -1 for rows at
// any alignment. A float32 class's vectors load as naturally aligned pieces of their own bytes,
// not as two granules with words selected by a shift read at run time; the vectors, and so the
// bits, are the same at every alignment. One kernel holding the four float32 loops
// behind a branch took 80-128 registers (one loop: 64), hence a launch a class.
template <typename T, bool kExtras, int kShift>
__global__ void __launch_bounds__(kCrossEntropyThreads, !kExtras && sizeof(T) == 2 ? kCrossEntropyLeanCtasPerSm : 0)
    cross_entropy_forward_kernel(CrossEntropyArgs<T> a, int64_t first_row, int row_period) {
  using Row = CrossEntropyRow<T, kExtras>;
  __shared__ typename Row::Lse::Stat lse_slots[33];
  __shared__ StatVec<acc_t<T>, 1> sum_slots[33];
  __shared__ typename Row::Fold parked[kCrossEntropyThreads];
  const Row r(a, lse_slots, sum_slots, parked);
  for_rows(a.rows, first_row, row_period, [&](int64_t row) { r.template forward<kShift>(row); });
}

// Rows whose dlogits rows lie at other offsets in a granule than their logits rows.
template <typename T, bool kExtras, int kShift>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_backward_kernel(CrossEntropyArgs<T> a, int64_t first_row, int row_period) {
  __shared__ StatVec<acc_t<T>, 1> sum_slots[33];
  const CrossEntropyRow<T, kExtras> r(a, nullptr, sum_slots, nullptr);
  for_rows(a.rows, first_row, row_period,
           [&](int64_t row) { r.template gradient<kShift>(row, a.saved_lse[row], a.grad_of(row), 0, r.vectors); });
}

// Rows whose dlogits rows start at their logits rows' offsets in a granule (the host checks the
// strides and the bases): aligned granules at any row length.
template <typename T, bool kExtras>
__global__ void __launch_bounds__(kCrossEntropyThreads) cross_entropy_backward_granules_kernel(CrossEntropyArgs<T> a) {
  __shared__ StatVec<acc_t<T>, 1> sum_slots[33];
  const CrossEntropyRow<T, kExtras> r(a, nullptr, sum_slots, nullptr);
  for_rows(a.rows, 0, 1, [&](int64_t row) { r.gradient_granules(row, a.saved_lse[row], a.grad_of(row)); });
}

// Split rows, for batches of too few rows to fill the device: row blockIdx.x / C on a cluster of
// C = the row's chunks (cross_entropy_chunk_vectors) CTAs, CTA k folding chunk k. Rank 0 merges
// the other CTAs' thread folds, read from their shared memory, in chunk order into its own, which
// is what CrossEntropyRow::fold does over the whole row, so the loss and lse bits are the row
// kernel's; then writes the loss as the row kernel does. float64 asks for one CTA an SM: left to
// itself, ptxas held it to 80 registers and spilled 168 bytes (123 registers without).
template <typename T, bool kExtras>
__global__ void __launch_bounds__(kCrossEntropyThreads, sizeof(T) == 8 ? 1 : 0)
    cross_entropy_split_forward_kernel(CrossEntropyArgs<T> a) {
  using Row = CrossEntropyRow<T, kExtras>;
  __shared__ typename Row::Lse::Stat lse_slots[33];
  __shared__ StatVec<acc_t<T>, 1> sum_slots[33];
  __shared__ typename Row::Fold folds[kCrossEntropyThreads];
  const cg::cluster_group cluster = cg::this_cluster();
  const int chunks = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / chunks;
  const Row r(a, lse_slots, sum_slots, folds, rank == 0);
  int64_t t;
  T target_logit;
  r.read_target(row, &t, &target_logit);
  const int64_t v_begin = rank * r.chunk_vectors;
  typename Row::Fold f =
      r.template fold<-1>(a.logits + row * a.logits_stride, v_begin, min(r.vectors, v_begin + r.chunk_vectors));
  folds[threadIdx.x] = f;
  cluster.sync();
  if (rank == 0) {
    for (int k = 1; k < chunks; ++k) {
      const typename Row::Fold other = cluster.map_shared_rank(folds, k)[threadIdx.x];
      f.stat = Row::Lse::merge(f.stat, other.stat);
      f.wz += other.wz;
    }
  }
  cluster.sync();  // the other CTAs' shared memory stays until rank 0 has read it
  if (rank == 0) r.finish(row, f, t, target_logit);
}

// The gradient of split rows: row blockIdx.x / chunks, chunk blockIdx.x % chunks (no cluster:
// the gradient is elementwise, the same bits on any cut).
template <typename T, bool kExtras>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_split_backward_kernel(CrossEntropyArgs<T> a, int chunks) {
  __shared__ StatVec<acc_t<T>, 1> sum_slots[33];
  const CrossEntropyRow<T, kExtras> r(a, nullptr, sum_slots, nullptr);
  const int64_t row = blockIdx.x / chunks;
  const int64_t v_begin = (blockIdx.x % chunks) * r.chunk_vectors;
  r.template gradient<-1>(row, a.saved_lse[row], a.grad_of(row), v_begin, min(r.vectors, v_begin + r.chunk_vectors));
}

// The gradient of a staged row's granule (no label smoothing, no soft-capping: the staged
// kernel's rows) where the row has a target: the expressions of CrossEntropyRow::gradient, so the
// bits are its. The writer's pass is issue-bound, so the target is found by one test a granule,
// and rows without a target take StagedFillWriter instead of a test an element.
template <typename Acc> struct CrossEntropyStagedWriter {
  static constexpr int kUnroll = 4;  // output granules a thread has in flight
  Acc lse, p_factor, target_part;
  int target_granule, target_lane;  // where the target's gradient lies in the output row
  template <int VEC> __device__ __forceinline__ void operator()(Acc (&z)[1][VEC], int g, Acc (&d)[VEC]) const {
#pragma unroll
    for (int e = 0; e < VEC; ++e) d[e] = fast_exp(z[0][e] - lse) * p_factor;
    if (g == target_granule) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (e == target_lane) d[e] -= target_part;
    }
  }
};

// A row without a target (ignored: zeros; out of range: NaN) writes one value throughout.
template <typename Acc> struct StagedFillWriter {
  static constexpr int kUnroll = 4;
  Acc fill;
  template <int VEC> __device__ __forceinline__ void operator()(Acc (&)[1][VEC], int, Acc (&d)[VEC]) const {
#pragma unroll
    for (int e = 0; e < VEC; ++e) d[e] = fill;
  }
};

// 16-bit and float32 rows without label smoothing or soft-capping, staged whole in shared memory
// (row_staged.cuh: one CTA a row or a cluster's shares, any alignment): the row is read from
// HBM once, its statistic folded as it lands, and with kGradient the gradient is written from
// shared memory. The fold is the staged softmax's, so these rows' loss and lse are this kernel's
// whether or not it writes the gradient (the forward takes it too). Launched as rows x C CTAs
// in clusters of C, the dynamic shared memory staged_share_smem_bytes(P).
template <typename T, int THREADS, bool kGradient>
__global__ void __launch_bounds__(THREADS) cross_entropy_staged_kernel(CrossEntropyArgs<T> a) {
  using Acc = acc_t<T>;
  using Lse = SoftmaxForwardOp<T, false>;
  extern __shared__ __align__(128) unsigned char staged_bytes[];
  __shared__ uint64_t arrived[kStagedMaxChunks];
  __shared__ typename Lse::Stat slots[33];
  __shared__ typename Lse::Stat cluster_slots[kPortableClusterSize];

  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / ctas;
  const StagedRow<T, Lse> staged =
      stage_share<T, Lse>(a.logits + row * a.logits_stride, static_cast<int>(a.classes), rank, ctas, staged_bytes,
                          arrived);
  // The row's target, class weight and upstream gradient load while its share lands (thread 0
  // issued the bulk copies first: they do not wait for these loads).
  const int64_t t = a.target[row];
  const bool ignored = t == a.ignore_index, bad = !ignored && (t < 0 || t >= a.classes);
  const Acc w_t = a.weight && !ignored && !bad ? a.weight[t] : Acc(1);
  if constexpr (kGradient) allow_next_launch();  // a step's loss reduce, waiting for this grid
  // A step's upstream gradient comes from the kernel ahead (launched before it ends): wait for it
  // with the share already on its way.
  if constexpr (kGradient) wait_for_previous_grid();
  const Acc g = kGradient ? a.grad_of(row) : Acc(0);
  const typename Lse::Stat stat = staged_row_stat<T, Lse, THREADS>(staged, ctas, slots, cluster_slots);
  const Acc log_sum = precise_log(stat.w[1]);
  const Acc lse = stat.w[0] + log_sum;  // -inf for an all -inf row
  // The CTA holding the target's logit (in its shared memory, so the row may already be
  // overwritten in global memory) writes the loss; rank 0 does where there is no target.
  const bool writes_loss = threadIdx.x == 0 && (ignored || bad ? rank == 0 : staged.holds(static_cast<int>(t)));
  if (writes_loss) {
    Acc loss = Acc(0);
    if (bad) {
      loss = Acc(NAN);
    } else if (!ignored) {
      // As CrossEntropyRow::forward without smoothing: (max - z_t) + log(sum), exact near the max.
      loss = (Acc(1) - a.smoothing) * w_t * ((stat.w[0] - to_acc<Acc>(staged.element(static_cast<int>(t)))) + log_sum);
      if (a.z_scale != Acc(0)) loss += a.z_scale * lse * lse;
    }
    a.loss[row] = loss;
    a.lse[row] = lse;
  }
  if constexpr (kGradient) {
    const Acc target_part = ignored || bad ? Acc(0) : g * (Acc(1) - a.smoothing) * w_t;
    const Acc smooth_part = g * a.smoothing / Acc(a.classes);
    const Acc p_factor = target_part + smooth_part * Acc(0) + Acc(2) * a.z_scale * g * lse;
    T* const out = a.dlogits + row * a.dlogits_stride;
    if (ignored || bad) {
      write_staged_share<T, Lse, THREADS>(staged, rank, ctas, out, StagedFillWriter<Acc>{bad ? Acc(NAN) : Acc(0)});
    } else {
      const int target_byte = misalignment16(out) + static_cast<int>(t) * static_cast<int>(sizeof(T));
      const CrossEntropyStagedWriter<Acc> write{lse, p_factor, target_part, target_byte >> 4,
                                                (target_byte & 15) / static_cast<int>(sizeof(T))};
      write_staged_share<T, Lse, THREADS>(staged, rank, ctas, out, write);
    }
  }
}

}  // namespace reducekit::kernels
