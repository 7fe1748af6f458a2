// SPDX-License-Identifier: Apache-2.0
#include "plan/row_kernel_plan.hpp"

#include <algorithm>
#include <optional>

namespace reducekit {
namespace {

constexpr int kWarpThreads = 128;
constexpr std::size_t kMaxStashBytes = 200 * 1024;  // leaves room for a second CTA's reduction slots

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Registers a value takes in the accumulation type: float64 accumulates in two words.
int acc_words(int elem_bytes) { return elem_bytes == 8 ? 2 : 1; }

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

int pow2_floor(int64_t v) {
  int p = 1;
  while (2 * p <= v) p *= 2;
  return p;
}

// 16-bit rows widen to float32 in registers, so a tile loaded straight into registers keeps
// half as many bytes in flight per register as a float32 row does: too few to cover memory
// latency. Their CTAs (one per row share, no cluster) loop over rows instead, with the next
// kRowRing rows already streaming into shared memory. float32/float64 rows and clusters keep
// the direct loads: the ring measured slower there (bench/results/LOG.md).
RowKernelConfig with_ring(RowKernelConfig c, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  if (!limits.ring || elem_bytes >= 4 || c.cluster > 1) return c;
  const std::size_t tile_bytes = std::size_t(c.threads) * c.vpt * 16 * inputs;
  if (tile_bytes < limits.ring_min_tile_bytes) return c;
  const std::size_t ring_bytes = kRowRing * tile_bytes;
  if (ring_bytes <= std::min(limits.max_smem_per_block, kMaxStashBytes)) {
    c.ring = kRowRing;
    c.smem_bytes = ring_bytes;
  }
  return c;
}

// Split rows (see RowSplitConfig): a chunk is chunk_tiles tiles of 32 KB per input, and a CTA
// holds `ring` of them in shared memory. The chunk size follows from the row length's dtype and
// the limits alone. Rows with more chunks than the device holds CTAs at once stay on the
// stream kernel: a CTA may only wait for chunks whose CTAs are running.
RowSplitConfig plan_row_split(int64_t vectors, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  RowSplitConfig s;
  if (elem_bytes > limits.split_max_elem_bytes || limits.sm_count <= 0 || limits.split_chunk_tiles < 1 ||
      limits.split_ring < 2)
    return s;
  const std::size_t tile_bytes = std::size_t(kRowSplitThreads) * kRowSplitVpt * 16 * inputs;
  const int ring = limits.split_ring;
  int chunk_tiles = limits.split_chunk_tiles;
  while (chunk_tiles > 0 && std::size_t(ring) * chunk_tiles * tile_bytes > limits.max_smem_per_block) --chunk_tiles;
  if (chunk_tiles == 0) return s;
  const std::size_t smem = std::size_t(ring) * chunk_tiles * tile_bytes;
  const int per_sm = static_cast<int>(std::min<std::size_t>(limits.max_smem_per_sm / (smem + kRowSplitSmemReserve),
                                                            2048 / kRowSplitThreads));
  s.threads = kRowSplitThreads;
  s.vpt = kRowSplitVpt;
  s.chunk_tiles = chunk_tiles;
  s.ring = ring;
  s.grid = per_sm * limits.sm_count;
  s.smem_bytes = smem;
  const int64_t chunks = ceil_div(vectors, s.chunk_vectors());
  if (chunks < 2 || chunks > s.grid) return RowSplitConfig{};
  s.chunks = static_cast<int>(chunks);
  return s;
}

// Split rows re-read (RowSplitConfig::reread): rows of at least split_reread_from_bytes in
// chunks of at least split_reread_min_chunk_tiles tiles of kRowSplitVpt vectors a thread (more
// of the narrower tiles reread_split_vpt gives), at most one chunk a row a resident CTA
// (kRereadSplitCtasPerSm an SM, the kernel's launch bounds). A function of the row length, dtype
// and device only, as the on-chip split.
RowSplitConfig plan_row_split_reread(int64_t vectors, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  RowSplitConfig s;
  if (limits.split_reread_from_bytes <= 0 || limits.sm_count <= 0 ||
      vectors * 16 * inputs < limits.split_reread_from_bytes)
    return s;
  const int vpt = reread_split_vpt(elem_bytes, inputs);
  const int64_t resident = int64_t(limits.sm_count) * kRereadSplitCtasPerSm;
  const int64_t tiles = ceil_div(vectors, int64_t(kRowSplitThreads) * vpt);
  const int64_t min_tiles = int64_t(limits.split_reread_min_chunk_tiles) * kRowSplitVpt / vpt;
  const int64_t chunk_tiles = std::max<int64_t>({1, min_tiles, ceil_div(tiles, resident)});
  const int64_t chunks = ceil_div(tiles, chunk_tiles);
  if (chunks < 2) return s;
  s.threads = kRowSplitThreads;
  s.vpt = vpt;
  s.chunk_tiles = static_cast<int>(chunk_tiles);
  s.chunks = static_cast<int>(chunks);
  s.grid = static_cast<int>(resident);
  s.reread = true;
  return s;
}

// Rows held on chip: in one CTA's registers, a cluster's, or streamed with a shared-memory stash.
RowKernelConfig plan_held_rows(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  RowKernelConfig c;
  c.two_phase = limits.two_phase;
  c.l2_hints = cols * elem_bytes * inputs >= static_cast<int64_t>(limits.l2_hints_from_bytes);
  c.read_back_second = limits.read_back_second;
  c.vec = std::max(1, 16 / elem_bytes);
  const int vector_bytes = c.vec * elem_bytes;
  const int64_t vectors = std::max<int64_t>(1, ceil_div(cols, c.vec));

  // Short rows: at most one warp each, several rows per CTA, no block barrier.
  const int warp_vpt = row_warp_max_vpt(elem_bytes, inputs);
  if (vectors <= 32 * warp_vpt) {
    c.kind = RowKernelKind::kWarp;
    c.threads = kWarpThreads;
    c.lanes = std::clamp(pow2_ceil(vectors), 4, 32);
    c.vpt = pow2_ceil(ceil_div(vectors, 32));
    return c;
  }

  // One CTA per row while its registers hold the row: the row is read once and written from
  // registers. Tile values are kept in the accumulation type (two words for float64).
  c.kind = RowKernelKind::kBlock;
  const int words = acc_words(elem_bytes);
  const int max_vpt = std::max(1, kRowTileWords / (c.vec * words * inputs));
  // Rows that fit one tile a thread (a CTA or a cluster) take at most limits.max_tile_values
  // values a thread; the streaming kernel always takes max_vpt (the only tile it is built for).
  const int tile_vpt = std::clamp(pow2_floor(limits.max_tile_values / (c.vec * words * inputs)), 1, max_vpt);
  // limits.block_elems values a thread: each row costs a thread a fixed amount of work (its
  // address, the CTA reduction, the row's parameters), which must be spread over enough
  // elements, while small CTAs, several per SM, keep many rows in flight (LOG.md's sweeps).
  const int min_threads = std::clamp(limits.min_block_threads, 32, limits.max_block_threads);
  const int max_threads = std::max(min_threads, limits.max_block_threads);
  // Capped before the rounding up, which the cap takes back anyway: two-input rows of up to 2^30
  // values at block_elems 1 ask for 2^31 threads, past what pow2_ceil's int holds.
  const int64_t wanted = std::min<int64_t>(ceil_div(cols * inputs, std::max(1, limits.block_elems)), max_threads);
  c.threads = std::clamp(pow2_ceil(wanted), min_threads, max_threads);
  const int64_t per_thread = ceil_div(vectors, c.threads);
  if (per_thread <= tile_vpt) {
    c.vpt = pow2_ceil(per_thread);
    // Tiles come in powers of two; trim whole warps that would hold only padding
    // (N = 12800 in float32: 416 threads x 8 vectors, not 512).
    c.threads = static_cast<int>(std::min<int64_t>(c.threads, 32 * ceil_div(ceil_div(vectors, c.vpt), 32)));
    return with_ring(c, elem_bytes, inputs, limits);
  }

  // Longer: a cluster of such CTAs, the row still read once into registers (tiles of
  // tile_vpt, else of max_vpt where that keeps the cluster portable) ...
  const int portable = std::min(kPortableClusterSize, std::max(1, limits.max_cluster));
  for (const int vpt : {tile_vpt, max_vpt}) {
    const int64_t register_tiles = ceil_div(vectors, int64_t(c.threads) * vpt);
    if (register_tiles <= portable) {
      c.vpt = vpt;
      c.cluster = static_cast<int>(register_tiles);
      if (c.cluster > 1 && c.cluster >= limits.split_min_cluster) c.split = plan_row_split(vectors, elem_bytes, inputs, limits);
      return with_ring(c, elem_bytes, inputs, limits);
    }
  }
  c.vpt = max_vpt;
  // ... then several tiles per thread, the extra ones parked in shared memory. Past the
  // portable cluster size, 16-CTA clusters are used only where they keep the whole row on
  // chip when 8 would not.
  const int64_t tile_vectors = int64_t(c.threads) * c.vpt;
  const int64_t total_tiles = ceil_div(vectors, tile_vectors);
  const std::size_t tile_bytes = std::size_t(tile_vectors) * vector_bytes * inputs;
  const std::size_t stash_bytes = std::min(limits.max_smem_per_block, kMaxStashBytes);
  const int64_t on_chip_tiles = 1 + static_cast<int64_t>(stash_bytes / tile_bytes);
  c.cluster = portable;
  if (ceil_div(total_tiles, c.cluster) > on_chip_tiles && limits.max_cluster > portable) c.cluster = limits.max_cluster;
  c.tiles = static_cast<int>(ceil_div(total_tiles, c.cluster));
  c.stash_tiles = static_cast<int>(std::min<int64_t>(c.tiles - 1, stash_bytes / tile_bytes));
  c.smem_bytes = c.stash_tiles * tile_bytes;
  c.split = plan_row_split(vectors, elem_bytes, inputs, limits);
  if (c.split.chunks == 0) c.split = plan_row_split_reread(vectors, elem_bytes, inputs, limits);
  return c;
}

// Words a thread of a re-read row's tile.
int reread_tile_words(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  if (cols * elem_bytes * inputs >= limits.reread_small_tiles_from_bytes) return kRereadSmallTileWords;
  if (limits.reread_small_tiles_for_short_last) {
    const int vec = std::max(1, 16 / elem_bytes);
    const int64_t tile_vectors = int64_t(std::max(32, limits.max_block_threads / 32 * 32)) *
                                 reread_vpt(kRereadTileWords, vec, acc_words(elem_bytes), inputs);
    const int64_t last = ceil_div(cols, vec) % tile_vectors;
    if (last != 0 && 2 * last < tile_vectors) return kRereadSmallTileWords;
  }
  return kRereadTileWords;
}

// A held plan's row as re-read rows (RowKernelLimits::reread_above_words).
RowKernelConfig reread_plan(const RowKernelConfig& held, int64_t cols, int elem_bytes, int inputs,
                            const RowKernelLimits& limits) {
  RowKernelConfig c;
  c.kind = RowKernelKind::kBlock;
  c.vec = held.vec;
  c.two_phase = held.two_phase;
  c.l2_hints = held.l2_hints;
  c.read_back_second = held.read_back_second;
  c.loads_ahead = limits.loads_ahead;
  c.vpt = reread_vpt(reread_tile_words(cols, elem_bytes, inputs, limits), c.vec, acc_words(elem_bytes), inputs);
  c.threads = std::max(32, limits.max_block_threads / 32 * 32);
  const int64_t vectors = ceil_div(cols, c.vec);
  c.tiles = static_cast<int>(ceil_div(vectors, int64_t(c.threads) * c.vpt));
  // A row one tile covers takes the block kernel: no warps of padding only.
  if (c.tiles == 1) c.threads = static_cast<int>(std::min<int64_t>(c.threads, 32 * ceil_div(ceil_div(vectors, c.vpt), 32)));
  if (!limits.reread_over_split) c.split = held.split;
  const std::size_t tile_bytes = bulk_stash_tile_bytes(c.threads, c.vpt, inputs);
  const std::size_t budget = std::min(limits.reread_stash_bytes, limits.max_smem_per_block);
  c.stash_tiles = static_cast<int>(std::min<int64_t>({c.tiles - 1, static_cast<int64_t>(budget / tile_bytes),
                                                      int64_t(kMaxBulkStashTiles)}));
  c.smem_bytes = c.stash_tiles * tile_bytes;
  return c;
}

// The row staged in shared memory by the fewest CTAs (a cluster) of the band whose shares stay
// within its share_bytes; the thread layout follows from the row length. None where the row
// needs a larger cluster than the device launches or a share does not fit a CTA (or its barriers).
std::optional<RowKernelConfig> staged_plan(int64_t cols, int elem_bytes, const StagedBand& band,
                                           const RowKernelLimits& limits) {
  RowKernelConfig c;
  c.vec = std::max(1, 16 / elem_bytes);
  const int64_t vectors = ceil_div(cols, c.vec);
  const int64_t ctas = ceil_div(cols * elem_bytes, int64_t(std::max<std::size_t>(band.share_bytes, 1)));
  const int64_t share = ceil_div(vectors, ctas);
  if (ctas > std::min(kPortableClusterSize, limits.max_cluster)) return std::nullopt;
  if (staged_share_smem_bytes(share) > limits.max_smem_per_block) return std::nullopt;
  if (share + 3 > int64_t(kStagedMaxChunks) * kStagedChunkGranules) return std::nullopt;
  c.kind = RowKernelKind::kStaged;
  c.threads = band.threads;
  c.cluster = static_cast<int>(ctas);
  c.tiles = static_cast<int>(ceil_div(share, c.threads));
  c.smem_bytes = staged_share_smem_bytes(share);
  return c;
}

// The wide row (kWideRowThreads, RowKernelLimits::wide_rows): one CTA, kWideTileValues values a
// thread, whole warps. None where the row is not in the family's band (wide_above_threads or
// wide_whole_above_threads, wide_max_threads).
std::optional<RowKernelConfig> wide_plan(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  // Their kernels reduce two-phase ops in two phases only (row_wide_kernel_ext).
  if (!limits.wide_rows || !limits.two_phase || elem_bytes > 4) return std::nullopt;
  if (inputs != 1 && !(inputs == 2 && limits.wide_input_sums)) return std::nullopt;
  RowKernelConfig c;
  c.kind = RowKernelKind::kWide;
  c.two_phase = limits.two_phase;
  c.vec = 16 / elem_bytes;
  c.vpt = kWideTileValues / c.vec;
  c.threads = static_cast<int>(32 * ceil_div(ceil_div(ceil_div(cols, c.vec), c.vpt), 32));
  const bool whole = cols == int64_t(c.threads) * kWideTileValues;
  const int above_ragged = limits.wide_above_threads > 0 ? limits.wide_above_threads : limits.max_block_threads;
  const int above = whole && limits.wide_whole_above_threads > 0 ? limits.wide_whole_above_threads : above_ragged;
  const int most = std::min(whole || limits.wide_partial_max_threads == 0 ? limits.wide_max_threads
                                                                           : limits.wide_partial_max_threads,
                            kWideRowThreads);
  if (cols <= int64_t(above) * kWideTileValues || cols > int64_t(most) * kWideTileValues) return std::nullopt;
  if (elem_bytes == 4 && limits.wide_fill_above_threads > 0 && c.threads > limits.wide_fill_above_threads) {
    const int64_t vectors = ceil_div(cols, c.vec);
    c.vpt = static_cast<int>(ceil_div(vectors, kWideRowThreads));
    c.threads = static_cast<int>(32 * ceil_div(ceil_div(vectors, c.vpt), 32));
  }
  const bool whole_roomy = whole && c.threads <= limits.wide_whole_roomy_max_threads;
  const bool roomy = c.threads <= limits.wide_roomy_max_threads || whole_roomy;
  const bool mid = c.threads <= std::min(limits.wide_mid_max_threads, kWideMidRowThreads) &&
                   (!roomy || c.threads > kWideRoomyPairThreads);  // two CTAs an SM, not one
  if (c.threads <= limits.wide_lean_max_threads && !whole_roomy) c.wide_form = WideForm::kLean;
  else if (mid) c.wide_form = WideForm::kMid;
  else if (roomy) c.wide_form = WideForm::kRoomy;
  return c;
}

}  // namespace

// Each entry's measurements: bench/results/LOG.md.
RowKernelLimits row_policy(RowFamily family, int elem_bytes) {
  RowKernelLimits l;
  l.reread_above_words = reread_above_words_for(family, elem_bytes);
  l.staged = staged_bands_for(family, elem_bytes);
  switch (family) {
    case RowFamily::kRowwise:
      l.reread_stash_bytes = kRereadStashBytes;  // the second pass reads shared memory, not L2
      l.reread_over_split = true;                // re-read rows beat split ones up to 1 MiB
      l.ring_min_tile_bytes = 32 * 1024;         // below 32 KB tiles direct loads keep enough in flight
      break;
    case RowFamily::kLayerNormForward:
      l.block_elems = elem_bytes == 2 || elem_bytes == 4 ? 16 : l.block_elems;  // 16 values a thread: faster
      l.reread_over_split = true;  // re-read beats split at 1 MiB rows
      // float32: the row's first three 8 KiB tiles parked, re-read from shared memory, not L2:
      // +1..+7% at 16K-128K values, level at 8K-12K and 256K; 7 or 11 tiles lost (LOG.md)
      if (elem_bytes == 4) l.reread_stash_bytes = 32 * 1024;
      // 16-bit rows of whole vectors past 7168 values, read once by one CTA of up to 512
      // threads, beat the re-read rows; past 16K values and at ragged lengths they lost (LOG.md).
      if (elem_bytes == 2) {
        l.wide_rows = true;
        l.wide_above_threads = 224;  // 8192 values as a whole wide row: +17..+21% over the ring rows
        // Every whole row (from 1024 values, one warp): +4..+17% at 4096 x 2048-6144, +12..+25%
        // at 8192-32768 rows of 1024-4096, level at 4096x1024; ragged 6400 lost 2-3% there (LOG.md)
        l.wide_whole_above_threads = 16;
        l.wide_max_threads = 512;
        l.wide_ragged = false;
        l.wide_lean_max_threads = 416;  // to 12800 values: +8..+17% at 48 registers; 448 threads lost 1-2%
        l.wide_whole_roomy_max_threads = 384;  // whole 9216-12288: +1..+8% on the full kernel (LOG.md)
      }
      // float32 rows of 8K-32K values, read once by one CTA of up to 1024 threads (packed wide
      // rows: 64 registers, no spill) beat the re-read and block rows: whole 10240-16384 +10..+19%,
      // 24576 +3%, 32768 +10%, 8192 +1%, and 12800 (416 threads) +14%; a partial 640-thread row
      // (20000) lost 5%, 6144 (192 threads) 3%, ragged 30001 13% (LOG.md).
      if (elem_bytes == 4) {
        l.wide_rows = true;
        l.wide_above_threads = 256;
        l.wide_whole_above_threads = 224;
        l.wide_partial_max_threads = 512;
        l.wide_ragged = false;
        l.wide_fill_above_threads = 512;  // 1024-thread CTAs: 20480-28672 +1..+4%, shifted 24579 +17%
      }
      l.reread_small_tiles_for_short_last = elem_bytes == 4;
      // float32 rows of whole vectors past one CTA and past the staged bands (staged_bands_for) on
      // the held clusters (x read once): level at 256000 values, ragged 50257 lost 20% (LOG.md)
      l.reread_ragged_lengths_only = elem_bytes == 4;
      if (elem_bytes == 2) l.reread_small_tiles_from_bytes = 0;  // 16-word tiles lost at 16-bit rows of 20-32 KB
      l.loads_ahead = elem_bytes == 4 ? 2 : elem_bytes == 2 ? 1 : 0;  // faster or level where they act (LOG.md)
      // Every re-read row's first pass kept in L2, as compile's first loop: +2..+5% at 20-40 KB rows
      if (elem_bytes <= 4) l.l2_hints_from_bytes = 0;
      break;
    case RowFamily::kRmsNormForward:
    case RowFamily::kRmsNormBiasForward:
      l.wide_rows = elem_bytes <= 4;  // 16-bit: aligned whole-vector rows cross the reduction packed
      // 16-bit rows from 3K values packed wide (CTAs of 128 threads and more): over the ring and
      // block rows +3..+15% at 3200-11008 values (65536x4096 +12%), with a bias +6..+19% from
      // 4096 (65536x4096 +18%); with a bias ragged 3200 lost 3% on 128 threads (LOG.md)
      if (elem_bytes == 2) l.wide_above_threads = family == RowFamily::kRmsNormBiasForward ? 127 : 96;
      // 513-768 threads on the middle form (40 registers, two CTAs an SM; the 32-register one
      // spills with a bias): +2..+4% without a bias, with one +22..+24% at 20000 and +16% at
      // whole 24576 over the roomy form (LOG.md)
      if (elem_bytes == 2) l.wide_mid_max_threads = kWideMidRowThreads;
      if (elem_bytes == 2 && family == RowFamily::kRmsNormForward) l.wide_roomy_max_threads = 512;
      // With a bias, only whole rows roomy: to 512 threads (their body without bounds; whole 16384
      // lost 5% on the middle form, ragged 12800 gained 18% there), and past 768, one CTA an SM
      // (32768: +18..+23%, the 32-register kernel spills there); without a bias, whole rows past
      // 512 threads lost 4-13% on it (LOG.md)
      if (elem_bytes == 2 && family == RowFamily::kRmsNormBiasForward) {
        l.wide_whole_roomy_max_threads = kWideRowThreads;
        l.block_elems = 16;  // 2-vector tiles: 2048-6144 +7..+24%, 8192 +3% (4-vector ones spill)
      }
      if (elem_bytes == 4) {
        l.block_elems = 16;       // the weight and statistics leave 32-value tiles too few registers
        l.max_tile_values = 32;   // rows past 16384 take clusters of 32-value tiles, not 64-value CTAs
      }
      // float32 rows past 512 threads on 1024-thread CTAs (wide_fill_above_threads): without a
      // bias 20480 +1.4%, ragged 20483 +33%, shifted 24579 +25%, 24576-28672 level; with one
      // 20480 +6%, 24576 +4%, 28672 +2%, ragged 20483 +20%, shifted 24579 +14% (LOG.md)
      if (elem_bytes == 4) l.wide_fill_above_threads = 512;
      l.reread_over_split = true;  // as layer_norm; no stash, as layer_norm
      break;
    case RowFamily::kResidualLayerNormForward:
    case RowFamily::kResidualRmsNormForward:
      l.reread_over_split = true;  // as the plain forms; no stash
      l.read_back_second = true;   // one array read again instead of two: 16-bit rows gain, float32 ties
      l.reread_ragged_lengths_only = elem_bytes == 4;  // reread_above_words_for
      // Wide rows holding s = x + residual. 16-bit rows of whole vectors from 1024 values, whole
      // to 1024 threads, others to 512 (one-statistic ops on the 64-register form): over the ring,
      // block and re-read rows both ops +11..+19% at 4096 x 2048-8192 and 32768x4096, +14..+33%
      // at 12800; whole 20480-32768 add_layer_norm +32..+43%, add_rms_norm +14..+15% (LOG.md).
      // float32 add_layer_norm past 256 threads (whole to 1024, others to 512): 12800 +3%, 24576
      // +12%, 32768 +20%; 8192 (256 threads) lost 4% (LOG.md). float32 add_rms_norm past 416
      // threads on the 64-register form: 20480 +17%, 24576 +2%, 32768 +9%, 16384 ties; 12800 (416
      // threads) lost 1.5%, 11008 1% (LOG.md).
      if (elem_bytes == 2 || elem_bytes == 4) {
        l.wide_rows = true;
        l.wide_input_sums = true;
        l.wide_ragged = false;
        l.wide_partial_max_threads = 512;
        l.wide_above_threads = elem_bytes == 2                          ? 224
                               : family == RowFamily::kResidualRmsNormForward ? 416
                                                                               : 256;
        if (elem_bytes == 2) l.wide_whole_above_threads = 16;
        if (family == RowFamily::kResidualRmsNormForward) l.wide_roomy_max_threads = kWideRowThreads;
        // float32 rows past 512 threads on 1024-thread CTAs at 5-7 vectors a thread, more warps
        // for the SM's one row: 20480-28672 add_layer_norm +13..+23%, add_rms_norm +3..+12%,
        // shifted 24579 +20% both; so rows that are not whole too, up to 7 vectors a thread
        // (28672 values): 18000-20000 +22..+49%; add_rms_norm 30000 (8 a thread) lost 7% (LOG.md)
        if (elem_bytes == 4) l.wide_fill_above_threads = 512, l.wide_partial_max_threads = 896;
      }
      break;
    case RowFamily::kNormBackward:
      l.reread_stash_bytes = kRereadStashBytes;  // parked, 16-bit rows gain
      break;
  }
  return l;
}

std::array<StagedBand, kMaxStagedBands> staged_bands_for(RowFamily family, int elem_bytes) {
  constexpr std::size_t KiB = 1024;
  const bool rms_norm = family == RowFamily::kRmsNormForward || family == RowFamily::kRmsNormBiasForward;
  // Past eight 72 KiB shares, float32 norm rows go back to 110 KiB shares (a cluster of 6-8).
  constexpr std::size_t kSmallShares = kPortableClusterSize * 72 * KiB;
  if (rms_norm && (elem_bytes == 2 || elem_bytes == 4)) {
    // The plain rms_norm forward (norm_staged.cuh): staged 16-bit rows from 56 KiB and float32
    // clusters beat its register rows (odd rows most); shorter rows lost (LOG.md).
    // Between 110 and 128 KiB a cluster of two stages ragged rows only: whole-vector rows
    // re-read 2-9% faster there, ragged ones 12-19% slower (LOG.md); from 144 KiB clusters win.
    if (elem_bytes == 2) {
      return {{
          {56 * KiB, 110 * KiB, kStagedThreads, 110 * KiB},
          {110 * KiB, 128 * KiB, kStagedThreads, 110 * KiB, true},
          {128 * KiB, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB},
      }};
    }
    // float32: ragged lengths only, where the register rows' shifted vectors run at half speed;
    // rows of whole vectors run faster on the register rows (LOG.md). 72 KiB shares over 110 KiB
    // ones: +3..+10% at 40001-128257 values (LOG.md).
    return {{{110 * KiB, kSmallShares, kStagedThreads, 72 * KiB, true},
             {kSmallShares, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB, true}}};
  }
  if (family == RowFamily::kLayerNormForward && (elem_bytes == 2 || elem_bytes == 4)) {
    // The plain layer_norm forward staged (Chan's count, mean and M2 in one pass, one cluster
    // exchange) over its re-read and held rows (LOG.md). 16-bit: ragged lengths from 56 KiB (as
    // rms_norm's), +3% at 32769 values, +7..+30% at 40001-256001; whole-vector rows lost 6-19%
    // (50264, 65536, 128256).
    if (elem_bytes == 2) return {{{56 * KiB, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB, true}}};
    // float32, any alignment (whole vectors below 128 KiB stay wide rows): 110 KiB shares +10..+23%
    // at 24577-50257 values, +8% at whole 50264; 72 KiB shares to 576 KiB, +13..+56% at
    // 65536-128257 (110 KiB shares gained less); 110 KiB shares again at 151937, +29% (LOG.md).
    // Below 88 KiB ragged lengths only: +12% at 16001, +3% at 20001; 12001 (48 KiB) lost 4%.
    return {{{56 * KiB, 88 * KiB, kStagedThreads, 110 * KiB, true},
             {88 * KiB, 224 * KiB, kStagedThreads, 110 * KiB},
             {224 * KiB, kSmallShares, kStagedThreads, 72 * KiB},
             {kSmallShares, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB}}};
  }
  if (family != RowFamily::kRowwise || (elem_bytes != 2 && elem_bytes != 4)) return {};
  // 16-bit softmax / log_softmax rows (LOG.md), other rows as the held and re-read
  // plans take them:
  std::array<StagedBand, kMaxStagedBands> bands = {{
      // 16-40 KiB: 256-thread CTAs, four an SM, beat the one-CTA register rows by 4-51% (log_softmax
      // 4096x11008 +31%); at 48 KiB they were mixed (-3% / +6%), at 16 KiB and below they lost;
      {16 * KiB, 40 * KiB, kStagedSmallThreads, 40 * KiB},
      // 64-110 KiB: one 512-thread CTA a row, two an SM, beat the re-read rows at any alignment
      // (64 KiB rows stay in registers: one CTA a row was slower there);
      {64 * KiB, 110 * KiB, kStagedThreads, 110 * KiB},
      // 128-880 KiB: clusters of up to eight such shares beat the re-read rows (151936 and 256000
      // columns by 6-8%); two 64 KiB shares lost to them at 128 KiB (1-5%).
      {128 * KiB, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB},
  }};
  // float32: the same bands for ragged lengths, where the register rows' shifted vectors select
  // their words by a run-time shift; rows of whole vectors stay on the register rows.
  if (elem_bytes == 4)
    for (StagedBand& band : bands) band.ragged_lengths_only = true;
  return bands;
}

std::array<StagedBand, kMaxStagedBands> cross_entropy_staged_bands(bool step) {
  std::array<StagedBand, kMaxStagedBands> bands = staged_bands_for(RowFamily::kRowwise, 2);
  // 40-72 KiB rows on one 256-thread CTA (three an SM by shared memory), not 512 threads (two an
  // SM by registers): bf16 forward +9..+43% at 20481-36000 classes, step +1..+25%; float32 10241
  // classes +16% in both; level from 64 KiB (LOG.md). The next band takes the rows the softmax
  // holds in registers, which the cross-entropy row kernels would read twice;
  bands[0].max_row_bytes = bands[0].share_bytes = 72 * 1024;
  bands[1].min_row_bytes = bands[0].max_row_bytes;
  // the step's 110-128 KiB rows (float32 32000 classes) on one CTA of 128 KiB, one an SM: over
  // the row kernels float32 +21% at 32000, +48% at 30001, over a cluster of two 110 KiB shares
  // +7..+9%; bfloat16 61440 ties; the forward alone there lost 21-42% (LOG.md)
  if (step) bands[1].max_row_bytes = bands[1].share_bytes = bands[2].min_row_bytes;
  // and the step's rows past 880 KiB (float32 256000 classes) on clusters of up to eight 200 KiB
  // shares, one CTA an SM: +21% over the row kernels' three passes there; 128 KiB shares (eight)
  // gained 8%, 144 KiB (seven) lost 1% (LOG.md).
  if (step) bands[3] = {bands[2].max_row_bytes, kPortableClusterSize * 200 * 1024, kStagedThreads, 200 * 1024};
  return bands;
}

int reread_above_words_for(RowFamily family, int elem_bytes) {
  // 16-bit rows past one CTA gain from re-reading in every family, while float32 rows past one
  // CTA gain only in layer_norm and lose in softmax, rms_norm and the backward: their clusters
  // hold the row in registers at few registers a value. One-CTA layer_norm rows gain from tiles
  // above 16 words (16-bit rows on one-vector tiles); other one-CTA rows lose (LOG.md).
  // Float32 residual rows past one CTA re-read where their length is ragged (row_policy's
  // reread_ragged_lengths_only): there the held clusters' shifted rows ran far below the re-read
  // rows, while aligned add_rms_norm rows lost on re-reading (LOG.md).
  if (elem_bytes == 8) return 0;
  if (family == RowFamily::kLayerNormForward) return 16;
  if (is_residual_family(family) && elem_bytes == 4) return kRereadPastOneCta;
  return elem_bytes == 2 ? kRereadPastOneCta : 0;
}

RowKernelConfig plan_row_kernel(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  // Wide rows before staged ones for lengths of whole vectors only: a ragged length shifts every
  // other row off its vectors, which the staged rows' bulk copies absorb and register rows do not
  // (LOG.md: twice as fast at float32 rms_norm 2048x50257).
  const std::size_t row_bytes = std::size_t(cols) * elem_bytes;
  const bool whole_vectors = row_bytes % 16 == 0;  // else every other row starts shifted off its vectors
  const std::optional<RowKernelConfig> wide = wide_plan(cols, elem_bytes, inputs, limits);
  if (wide && whole_vectors) return *wide;
  for (const StagedBand& band : limits.staged) {
    if (inputs != 1 || band.threads == 0 || row_bytes <= band.min_row_bytes || row_bytes > band.max_row_bytes) continue;
    if (band.ragged_lengths_only && whole_vectors) continue;
    if (const auto staged = staged_plan(cols, elem_bytes, band, limits)) return *staged;
  }
  if (wide && limits.wide_ragged) return *wide;
  const RowKernelConfig held = plan_held_rows(cols, elem_bytes, inputs, limits);
  if (limits.reread_above_words <= 0 || held.kind == RowKernelKind::kWarp) return held;
  if (cols * elem_bytes * inputs > kRereadMaxRowBytes) return held;
  const int held_words = held.vpt * held.vec * acc_words(elem_bytes) * inputs;
  const bool one_cta = held.cluster == 1 && held.tiles == 1;
  if (limits.reread_ragged_lengths_only && whole_vectors && !one_cta) return held;
  const int tile_words = reread_tile_words(cols, elem_bytes, inputs, limits);
  if (one_cta && held_words <= std::max(limits.reread_above_words, tile_words)) return held;
  return reread_plan(held, cols, elem_bytes, inputs, limits);
}

RowSplitWorkspace row_split_workspace(const RowKernelConfig& c, int64_t rows, std::size_t stat_bytes) {
  RowSplitWorkspace w;
  if (c.split.chunks == 0 || rows <= 0) return w;
  w.zeroed_bytes = (std::size_t(rows) * sizeof(unsigned) + 15) / 16 * 16;
  w.bytes = w.zeroed_bytes + std::size_t(rows) * c.split.chunks * stat_bytes;
  return w;
}

}  // namespace reducekit
