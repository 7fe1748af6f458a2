// SPDX-License-Identifier: Apache-2.0
// Staged rows: the whole row copied into shared memory by bulk copies (cp.async.bulk), one CTA
// a row or, for rows longer than one CTA's share, a cluster of CTAs each staging a contiguous
// share. Every pass reads shared memory, so HBM sees each input byte once and a CTA has its
// entire share in flight at once; several CTAs an SM overlap one's passes with the others'
// copies.
//
// Shared memory mirrors the row's global 16-byte granules (mirror slot 1 + g holds granule g;
// slot 0 and the slots past the row are spares that shifted reads may touch), so the copy moves
// whole aligned granules whatever the row's alignment; the partial granules at the row's two
// ends are filled element by element, and nothing outside the row is read.
//
//   global:  |..ssaaaa|bbbbcccc|ddee....|    a row starting s bytes past a granule
//   mirror:  | spare | ..ssaaaa|bbbbcccc|ddee....| spare | spare |
//
// CTA r of a C-CTA cluster owns the row's vectors [r P, (r + 1) P) (P = ceil(vectors / C)) and
// holds mirror slots [r P, r P + P + 3): its vectors and the neighbours' granules its shifted
// reads and output granules reach into (a few granules are copied by two CTAs).
//
// Two passes. The first folds the op's merged statistic while the share lands, over the
// share's VEC-element vectors as the block kernels lay them out (thread t: vectors t, t + T,
// ...; a shifted row's vector is funnel-shifted out of two granules); a cluster merges its
// CTAs' statistics in rank order through distributed shared memory. So the order of every
// combine is a function of the row length alone and the results keep their bits at every
// alignment. The second writes the output, granule by granule of the output row (elementwise
// once the row's parameters are known, as kTwoPhase ops' outputs are, row_engine.cuh):
// fold_second against the row's First statistic (Op::first_of) leaves what output() takes.
// Each pass is compiled twice: for aligned reads and for reads at a run-time shift (staged_read).
#pragma once

#include <cuda/ptx>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/row_engine.cuh"

namespace reducekit::kernels {

// The 16 bytes at byte `shift` of buf[i] (reaching into buf[i + 1] when shift > 0). Shifted
// reads take the shift at run time: eight compiled copies of each pass (one a shift) overflowed
// the instruction cache where CTAs an SM ran rows of different shifts. The five words read span
// both granules, and one funnel shift a word aligns them.
template <bool kShifted> __device__ __forceinline__ Bytes16 staged_read(const Bytes16* buf, int i, int shift) {
  if constexpr (!kShifted) {
    return load_aligned16(buf + i);
  } else {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(buf + i) + (shift >> 2);
    uint32_t u[5];
#pragma unroll
    for (int k = 0; k < 5; ++k) u[k] = w[k];
    const unsigned bits = static_cast<unsigned>(shift & 3) * 8;
    Bytes16 r;
#pragma unroll
    for (int j = 0; j < 4; ++j) r.w[j] = __funnelshift_r(u[j], u[j + 1], bits);
    return r;
  }
}

// Calls f.template run<kShifted>() for the shift (bytes): one compiled copy of a pass for
// aligned reads, one for every other shift.
template <class F> __device__ __forceinline__ void with_shift(int shift, F& f) {
  if (shift == 0) f.template run<false>();
  else f.template run<true>();
}

// A CTA's share of a staged row: the shared-memory slots it holds and where they lie.
template <typename T, class Op> struct StagedRow {
  using Acc = typename Op::Acc;
  using PackT = Pack<T, 16 / sizeof(T)>;
  static constexpr int VEC = 16 / sizeof(T);
  const Bytes16* buf;  // buf[m - first] holds mirror slot m
  int cols, first, chunks;
  int shift;  // the row's bytes past a granule boundary
  uint64_t* arrived;
  int share;  // vectors a CTA of the row owns: [first, first + share)

  // Vector v of the row (elements v * VEC ..): its values, pads past the end
  // (only the row's last vector has any: the others skip the per-element test).
  template <bool kShifted> __device__ __forceinline__ void whole_vector_at(int v, Acc (&vals)[1][VEC]) const {
    unpack_to_acc(pack_of<PackT>(staged_read<kShifted>(buf, 1 + v - first, shift)), vals[0]);
  }
  template <bool kShifted> __device__ __forceinline__ void vector_at(int v, Acc (&vals)[1][VEC]) const {
    const PackT p = pack_of<PackT>(staged_read<kShifted>(buf, 1 + v - first, shift));
    if (v * VEC + VEC <= cols) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) vals[0][e] = to_acc<Acc>(p.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) vals[0][e] = v * VEC + e < cols ? to_acc<Acc>(p.v[e]) : Op::pad(0);
    }
  }
  // Element j of the row, from shared memory: a CTA holds the elements of its own vectors once
  // every chunk has landed (after its fold pass).
  __device__ __forceinline__ T element(int j) const {
    return *reinterpret_cast<const T*>(reinterpret_cast<const char*>(buf) + 16 * (1 - first) + shift + j * sizeof(T));
  }
  __device__ __forceinline__ bool holds(int j) const { return j / VEC >= first && j / VEC < first + share; }
  __device__ __forceinline__ void wait_chunk(int k) const {
    while (!cuda::ptx::mbarrier_try_wait_parity(&arrived[k], 0u)) {
    }
  }
  // The chunk holding mirror slot m.
  __device__ __forceinline__ int chunk_of(int m) const { return min((m - first) / kStagedChunkGranules, chunks - 1); }
};

// Folds whose statistic counts its elements (layer_norm's count, mean and M2) take a partial
// vector's real elements by count (Op::fold_valid); the others fold its pads, which add nothing.
template <class Op, class = void> struct FoldsValidCount : std::false_type {};
template <class Op>
struct FoldsValidCount<Op, std::void_t<decltype(&Op::template fold_valid<1>)>> : std::true_type {};

// The statistic over this thread's vectors of the share [lo, hi), the op's merged one (softmax:
// the max with the sum of exp(x - max), one exp an element), folded as the share lands: each
// chunk is waited for when a vector first reaches into it, and every chunk before the pass ends.
// Whole vectors go two a trip, folded together (one merge a trip: the pass is issue-bound, and a
// merge costs an exp and a dozen instructions); which vectors pair follows from the row length
// alone, so the bits stay those of the row at any alignment and in any batch.
template <typename T, class Op, int THREADS> struct StagedFoldPass {
  const StagedRow<T, Op>& row;
  int lo, hi;
  typename Op::Stat stat;
  int ready = 0;                // chunks waited for
  int unwaited_from = INT_MIN;  // the first vector reaching into a chunk not waited for

  template <bool kShifted> __device__ __forceinline__ void wait_for(int v) {
    constexpr int kReach = kShifted ? 1 : 0;  // a shifted vector reads the next slot too
    if (v < unwaited_from) return;
    const int need = row.chunk_of(1 + v + kReach);  // its last slot's
    for (; ready <= need; ++ready) row.wait_chunk(ready);
    unwaited_from = ready < row.chunks ? row.first + ready * kStagedChunkGranules - 1 - kReach : INT_MAX;
  }
  template <bool kShifted> __device__ __forceinline__ void run() {
    constexpr int VEC = StagedRow<T, Op>::VEC;
    using Acc = typename Op::Acc;
    const int whole_hi = min(hi, row.cols / VEC);  // vectors wholly inside the row
    int v = lo + threadIdx.x;
    for (; v + THREADS < whole_hi; v += 2 * THREADS) {
      wait_for<kShifted>(v + THREADS);
      Acc a[1][VEC], b[1][VEC], ab[1][2 * VEC];
      row.template whole_vector_at<kShifted>(v, a);
      row.template whole_vector_at<kShifted>(v + THREADS, b);
#pragma unroll
      for (int e = 0; e < VEC; ++e) ab[0][e] = a[0][e], ab[0][VEC + e] = b[0][e];
      stat = Op::merge(stat, Op::fold(ab));
    }
    for (; v < hi; v += THREADS) {
      wait_for<kShifted>(v);
      Acc vals[1][VEC];
      row.template vector_at<kShifted>(v, vals);
      if constexpr (FoldsValidCount<Op>::value)
        stat = Op::merge(stat, Op::fold_valid(vals, min(VEC, row.cols - v * VEC)));
      else
        stat = Op::merge(stat, Op::fold(vals));
    }
    for (; ready < row.chunks; ++ready) row.wait_chunk(ready);
  }
};

// Output granules [lo, hi) of the output row (which starts so bytes past a granule): granule g
// holds the input bytes at mirror offset 16 g + s - so, i.e. mirror slot g + (base >> 4)
// shifted by base & 15 with base = s - so + 16 in [1, 31]. write(vals, g, r) turns
// granule g's input values into its outputs (its element e is column (16 g + e ES - so) / ES).
// A writer with a Fetched type may load what a granule takes beside its input (fetch(g), where
// fetches() holds) ahead of the input's shared-memory read; those granules store without the
// memory clobber, so the next granule's loads may issue ahead of the store.
template <class W, class = void> struct FetchesBeside : std::false_type {};
template <class W> struct FetchesBeside<W, std::void_t<typename W::Fetched>> : std::true_type {};

template <typename T, class Op, int THREADS, class Writer> struct StagedOutputPass {
  const StagedRow<T, Op>& row;
  const Writer& write;
  char* out_floor;
  int so, base, lo, hi;
  template <bool kShifted> __device__ __forceinline__ void run() {
    if constexpr (FetchesBeside<Writer>::value)
      if (write.fetches()) return granules<kShifted, true>();
    granules<kShifted, false>();
  }
  template <bool kShifted, bool kFetch> __device__ __forceinline__ void granules() {
    using Row = StagedRow<T, Op>;
    constexpr int VEC = Row::VEC;
    constexpr int ES = sizeof(T);
    const int row_bytes = row.cols * ES;
    const int slot_of_granule = (base >> 4) - row.first;  // output granule g's first slot, held locally
#pragma unroll(Writer::kUnroll)  // output granules a thread has in flight: the writer's choice
    for (int g = lo + threadIdx.x; g < hi; g += THREADS) {
      typename Op::Acc vals[1][VEC];
      typename Op::Acc r[VEC];
      if constexpr (kFetch) {
        const typename Writer::Fetched fetched = write.fetch(g);
        unpack_to_acc(pack_of<typename Row::PackT>(staged_read<kShifted>(row.buf, g + slot_of_granule, base & 15)), vals[0]);
        write(vals, g, fetched, r);
      } else {
        unpack_to_acc(pack_of<typename Row::PackT>(staged_read<kShifted>(row.buf, g + slot_of_granule, base & 15)), vals[0]);
        write(vals, g, r);
      }
      const typename Row::PackT o = pack_from_acc<T>(r);
      const int byte_lo = 16 * g;
      if (byte_lo >= so && byte_lo + 16 <= so + row_bytes) {
        if constexpr (kFetch) store_aligned16_unordered(out_floor + byte_lo, bytes_of(o));
        else store_aligned16(out_floor + byte_lo, bytes_of(o));
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int byte = byte_lo + e * ES;
          if (byte >= so && byte < so + row_bytes) *reinterpret_cast<T*>(out_floor + byte) = o.v[e];
        }
      }
    }
  }
};

// A kTwoPhase op's outputs from the row's merged statistic: fold_second against its First
// statistic leaves in vals what output() takes (softmax: exp(x - max)).
template <class Op, class Local> struct StagedTwoPhaseWriter {
  static constexpr int kUnroll = 4;
  typename Op::First::Stat first;
  Local local;
  template <int VEC> __device__ __forceinline__ void operator()(typename Op::Acc (&vals)[1][VEC], int,
                                                                typename Op::Acc (&r)[VEC]) const {
    Op::fold_second(vals, first);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const typename Op::Acc v[1] = {vals[0][e]};
      r[e] = Op::output(v, local);
    }
  }
};

// CTA `rank` of the `ctas` staging a row of `cols` elements at `in`: thread 0 starts the bulk
// copies of its mirror slots, threads 1 .. 2 VEC fill the row's partial end granules it holds,
// and the CTA syncs; with ctas > 1 every thread first arrives on the cluster barrier for
// staged_row_stat's exchange (cluster_arrive_at_start). `staged_bytes`:
// staged_share_smem_bytes(share) of dynamic shared memory.
template <typename T, class Op>
__device__ __forceinline__ StagedRow<T, Op> stage_share(const T* in, int cols, int rank, int ctas,
                                                        unsigned char* staged_bytes, uint64_t* arrived) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int ES = sizeof(T);
  Bytes16* buf = reinterpret_cast<Bytes16*>(staged_bytes);
  const int row_bytes = cols * ES;
  const int vectors = (cols + VEC - 1) / VEC;
  const int share = (vectors + ctas - 1) / ctas;
  const int first = rank * share;  // this CTA's first mirror slot, and its first vector
  const int s = misalignment16(in);
  const int granules = (s + row_bytes + 15) / 16;
  const int first_whole = s > 0 ? 1 : 0;
  const int last_whole = (s + row_bytes) / 16 - 1;
  // Granules held: mirror slots [first, first + share + 3) are granules from first - 1.
  const int g_lo = max(first - 1, 0);
  const int g_hi = min(first + share + 1, granules - 1);
  const int chunks = (share + 3 + kStagedChunkGranules - 1) / kStagedChunkGranules;
  if (ctas > 1) cluster_arrive_at_start();

  if (threadIdx.x == 0) {
    for (int k = 0; k < chunks; ++k) cuda::ptx::mbarrier_init(&arrived[k], 1);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
    const char* floor = reinterpret_cast<const char*>(in) - s;
    for (int k = 0; k < chunks; ++k) {
      const int lo = max(first - 1 + k * kStagedChunkGranules, max(g_lo, first_whole));
      const int hi = min(first - 1 + (k + 1) * kStagedChunkGranules - 1, min(g_hi, last_whole));
      const int count = max(hi - lo + 1, 0);
      cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                           &arrived[k], 16u * count);
      if (count > 0)
        cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, buf + 1 + lo - first,
                                 floor + 16 * lo, 16u * count, &arrived[k]);
    }
  } else if (threadIdx.x <= 2 * VEC) {
    // The partial granules at the row's ends, an element a thread, where this CTA holds them:
    // the head's elements sit at bytes [s, 16) of granule 0, the tail's from the start of
    // granule last_whole + 1.
    const int j = threadIdx.x - 1;
    const int head_elems = s > 0 ? min((16 - s) / ES, cols) : 0;
    const int tail_first = max((16 * (last_whole + 1) - s) / ES, head_elems);
    const int e = j < VEC ? j : tail_first + (j - VEC);
    const int granule = j < VEC ? 0 : last_whole + 1;
    const bool mine = (j < VEC ? e < head_elems : e < cols) && granule >= g_lo && granule <= g_hi;
    if (mine) *reinterpret_cast<T*>(staged_bytes + 16 * (1 - first) + s + e * ES) = in[e];
  }
  __syncthreads();
  return {buf, cols, first, chunks, s, arrived, share};
}

// The row's merged statistic in every thread of every CTA of its cluster: the CTA's share folded
// as it lands, the CTA's threads merged (block_butterfly_reduce), then the cluster's CTAs in rank
// order (cluster_exchange into `cluster_slots`, kPortableClusterSize of them: a staged CTA's
// one exchange).
template <typename T, class Op, int THREADS>
__device__ __forceinline__ typename Op::Stat staged_row_stat(const StagedRow<T, Op>& staged, int ctas,
                                                              typename Op::Stat* slots,
                                                              typename Op::Stat* cluster_slots) {
  constexpr int VEC = 16 / sizeof(T);
  const int vectors = (staged.cols + VEC - 1) / VEC;
  StagedFoldPass<T, Op, THREADS> fold{staged, staged.first, min(staged.first + staged.share, vectors), Op::identity()};
  with_shift(staged.shift, fold);
  typename Op::Stat stat = block_butterfly_reduce<Op>(fold.stat, slots);
  if (ctas > 1) {
    cluster_wait_started();
    stat = cluster_exchange<Op>(stat, cluster_slots);
  }
  return stat;
}

// Writes the output granules of CTA `rank`'s share of the row (the last CTA: through the row's
// end) at `out`, from its staged input.
template <typename T, class Op, int THREADS, class Writer>
__device__ __forceinline__ void write_staged_share(const StagedRow<T, Op>& staged, int rank, int ctas, T* out,
                                                   const Writer& write) {
  const int so = misalignment16(out);
  const int out_granules = (so + staged.cols * int(sizeof(T)) + 15) / 16;
  const int out_hi = rank == ctas - 1 ? out_granules : min(staged.first + staged.share, out_granules);
  StagedOutputPass<T, Op, THREADS, Writer> output{staged, write, reinterpret_cast<char*>(out) - so, so,
                                                  staged.shift - so + 16, staged.first, out_hi};
  with_shift((staged.shift - so + 16) & 15, output);
}

// Launched as rows x C CTAs in clusters of C (a plain launch: C = 1), the dynamic shared memory
// staged_share_smem_bytes(P).
template <typename T, class Op, int THREADS>
__global__ void __launch_bounds__(THREADS) row_staged_kernel(RowArgs<T, 1> args) {
  extern __shared__ __align__(128) unsigned char staged_bytes[];
  __shared__ uint64_t arrived[kStagedMaxChunks];
  __shared__ typename Op::Stat slots[33];
  __shared__ typename Op::Stat cluster_slots[kPortableClusterSize];

  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / ctas;
  const StagedRow<T, Op> staged =
      stage_share<T, Op>(args.in[0] + row * args.in_stride[0], args.cols, rank, ctas, staged_bytes, arrived);
  const typename Op::Stat stat = staged_row_stat<T, Op, THREADS>(staged, ctas, slots, cluster_slots);
  const auto local = Op::local_two(Op::finalize(stat));
  const StagedTwoPhaseWriter<Op, decltype(local)> write{Op::first_of(stat), local};
  write_staged_share<T, Op, THREADS>(staged, rank, ctas, args.out + row * args.out_stride, write);
}

}  // namespace reducekit::kernels
