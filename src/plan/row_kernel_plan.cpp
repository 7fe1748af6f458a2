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
      // float32: the first three 8 KiB tiles parked, so the second pass reads them on chip, not from L2
      if (elem_bytes == 4) l.reread_stash_bytes = 32 * 1024;
      // 16-bit: rows of whole vectors read once by one CTA beat the ring and re-read rows from one
      // warp to 16K values; ragged rows and longer ones stay off them.
      if (elem_bytes == 2) {
        l.wide_rows = true;
        l.wide_above_threads = 224;
        l.wide_whole_above_threads = 16;
        l.wide_max_threads = 512;
        l.wide_ragged = false;
        l.wide_lean_max_threads = 416;         // the 48-register form as far as it beat the full one
        l.wide_whole_roomy_max_threads = 384;  // whole rows past the lean form: the full kernel
      }
      // float32 rows of 8K-32K values read once by one CTA (64 registers, no spill) beat the
      // re-read and block rows; partial rows past 512 threads and ragged ones did not.
      if (elem_bytes == 4) {
        l.wide_rows = true;
        l.wide_above_threads = 256;
        l.wide_whole_above_threads = 224;
        l.wide_partial_max_threads = 512;
        l.wide_ragged = false;
        l.wide_fill_above_threads = 512;  // past 512 threads, 1024-thread CTAs: more warps for the SM's one row
      }
      l.reread_small_tiles_for_short_last = elem_bytes == 4;
      // float32 rows of whole vectors past one CTA and the staged bands: the held clusters read x once
      l.reread_ragged_lengths_only = elem_bytes == 4;
      if (elem_bytes == 2) l.reread_small_tiles_from_bytes = 0;  // 16-word tiles lost at 16-bit rows
      l.loads_ahead = elem_bytes == 4 ? 2 : elem_bytes == 2 ? 1 : 0;  // shifted re-read rows: tiles' loads issued ahead
      // Every re-read row's first read kept in L2 (RowKernelConfig::l2_hints) for its second pass
      if (elem_bytes <= 4) l.l2_hints_from_bytes = 0;
      break;
    case RowFamily::kRmsNormForward:
    case RowFamily::kRmsNormBiasForward:
      l.wide_rows = elem_bytes <= 4;  // 16-bit: aligned whole-vector rows cross the reduction packed
      // 16-bit rows from 3K values (CTAs of 128 threads and more) packed wide beat the ring and block rows
      if (elem_bytes == 2) l.wide_above_threads = family == RowFamily::kRmsNormBiasForward ? 127 : 96;
      // 513-768 threads on the middle form: 40 registers, two CTAs an SM (the 32-register form
      // spills with a bias)
      if (elem_bytes == 2) l.wide_mid_max_threads = kWideMidRowThreads;
      if (elem_bytes == 2 && family == RowFamily::kRmsNormForward) l.wide_roomy_max_threads = 512;
      // With a bias only whole rows take the roomy form (their body has no bounds tests), and
      // every row past 768 threads (one CTA an SM: the 32-register kernel spills there).
      if (elem_bytes == 2 && family == RowFamily::kRmsNormBiasForward) {
        l.wide_whole_roomy_max_threads = kWideRowThreads;
        l.block_elems = 16;  // 2-vector tiles: 4-vector ones spill beside the weight and bias
      }
      if (elem_bytes == 4) {
        l.block_elems = 16;       // the weight and statistics leave 32-value tiles too few registers
        l.max_tile_values = 32;   // rows past 16384 take clusters of 32-value tiles, not 64-value CTAs
      }
      // float32 rows past 512 threads on 1024-thread CTAs: more warps for the SM's one row
      if (elem_bytes == 4) l.wide_fill_above_threads = 512;
      l.reread_over_split = true;  // as layer_norm; no stash, as layer_norm
      break;
    case RowFamily::kResidualLayerNormForward:
    case RowFamily::kResidualRmsNormForward:
      l.reread_over_split = true;  // as the plain forms; no stash
      l.read_back_second = true;   // one array read again instead of two: 16-bit rows gain, float32 ties
      l.reread_ragged_lengths_only = elem_bytes == 4;  // reread_above_words_for
      // Wide rows holding s = x + residual (read once, not re-read): 16-bit rows of whole vectors
      // from 1024 values, float32 add_layer_norm past 256 threads, add_rms_norm past 416 (the
      // 64-register form), whole rows to 1024 threads and others to 512, where each beat the
      // ring, block and re-read rows.
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
        // float32 rows past 512 threads on 1024-thread CTAs (more warps for the SM's one row),
        // whole or not, up to 7 vectors a thread (28672 values; 8 a thread lost)
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
    // clusters beat its register rows (odd rows most); shorter rows lost. Between 110 and 128
    // KiB a cluster of two stages ragged rows only (whole-vector rows re-read faster there).
    if (elem_bytes == 2) {
      return {{
          {56 * KiB, 110 * KiB, kStagedThreads, 110 * KiB},
          {110 * KiB, 128 * KiB, kStagedThreads, 110 * KiB, true},
          {128 * KiB, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB},
      }};
    }
    // float32: ragged lengths only, where the register rows' shifted vectors run at half speed
    // (rows of whole vectors run faster on the register rows); 72 KiB shares, more CTAs an SM.
    return {{{110 * KiB, kSmallShares, kStagedThreads, 72 * KiB, true},
             {kSmallShares, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB, true}}};
  }
  if (family == RowFamily::kLayerNormForward && (elem_bytes == 2 || elem_bytes == 4)) {
    // The plain layer_norm forward staged (Chan's count, mean and M2 in one pass, one cluster
    // exchange) over its re-read and held rows. 16-bit: ragged lengths from 56 KiB, as
    // rms_norm's (whole-vector rows lost on them).
    if (elem_bytes == 2) return {{{56 * KiB, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB, true}}};
    // float32 from 56 KiB: ragged lengths only below 88 KiB, any alignment above (whole vectors
    // below 128 KiB stay wide rows); 72 KiB shares from 224 KiB to eight, where they beat 110 KiB ones.
    return {{{56 * KiB, 88 * KiB, kStagedThreads, 110 * KiB, true},
             {88 * KiB, 224 * KiB, kStagedThreads, 110 * KiB},
             {224 * KiB, kSmallShares, kStagedThreads, 72 * KiB},
             {kSmallShares, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB}}};
  }
  if (family != RowFamily::kRowwise || (elem_bytes != 2 && elem_bytes != 4)) return {};
  // 16-bit softmax / log_softmax rows, other rows as the held and re-read plans take them:
  std::array<StagedBand, kMaxStagedBands> bands = {{
      // 16-40 KiB: 256-thread CTAs, four an SM, beat the one-CTA register rows (not at 48 KiB or 16 KiB)
      {16 * KiB, 40 * KiB, kStagedSmallThreads, 40 * KiB},
      // 64-110 KiB: one 512-thread CTA a row, two an SM, beat the re-read rows at any alignment
      // (64 KiB rows stay in registers: one CTA a row was slower there)
      {64 * KiB, 110 * KiB, kStagedThreads, 110 * KiB},
      // 128-880 KiB: clusters of up to eight such shares beat the re-read rows (and two 64 KiB shares)
      {128 * KiB, kPortableClusterSize * 110 * KiB, kStagedThreads, 110 * KiB},
  }};
  // float32: the same bands for ragged lengths, where the register rows' shifted vectors select
  // their words by a run-time shift; rows of whole vectors stay on the register rows. The one-CTA
  // band from 40 KiB: ragged float32 rows of 40-64 KiB staged beat their register rows too.
  if (elem_bytes == 4) {
    for (StagedBand& band : bands) band.ragged_lengths_only = true;
    bands[1].min_row_bytes = bands[0].max_row_bytes;
  }
  return bands;
}

std::array<StagedBand, kMaxStagedBands> cross_entropy_staged_bands(bool step) {
  std::array<StagedBand, kMaxStagedBands> bands = staged_bands_for(RowFamily::kRowwise, 2);
  // 40-72 KiB rows on one 256-thread CTA (three an SM by shared memory), not 512 threads (two an
  // SM by registers). The next band takes the rows the softmax holds in registers, which the
  // cross-entropy row kernels would read twice;
  bands[0].max_row_bytes = bands[0].share_bytes = 72 * 1024;
  bands[1].min_row_bytes = bands[0].max_row_bytes;
  // the step's 110-128 KiB rows (float32 32000 classes) on one CTA of 128 KiB, one an SM, over
  // the row kernels and a cluster of two 110 KiB shares (the forward alone lost there);
  if (step) bands[1].max_row_bytes = bands[1].share_bytes = bands[2].min_row_bytes;
  // and the step's rows past 880 KiB (float32 256000 classes) on clusters of up to eight 200 KiB
  // shares, one CTA an SM, over the row kernels' three passes and smaller shares.
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
  // other row off its vectors, which the staged rows' bulk copies absorb and register rows do not.
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
