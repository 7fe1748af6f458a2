// SPDX-License-Identifier: Apache-2.0
// Chooses how the row engine (src/kernels/row_engine.cuh) lays a row of length `cols` onto
// threads. The choice depends only on the row length, the element size and the device
// limits -- never on the number of rows or the alignment of the tensor -- so a row's result
// does not change with the batch it sits in.
//
//   rows up to 16 elements a lane -> kWarp:  4..32 lanes per row, several rows per CTA
//   fits one CTA's registers       -> kBlock: one CTA per row, each thread holding vpt vectors;
//                                     CTAs loop over rows with the next rows streaming
//                                     into shared memory (ring)
//   rows a 512-thread CTA holds only past kWideTileValues values a thread -> kWide, where the
//                                     family says so (wide_rows, its band in wide_above_threads
//                                     and wide_max_threads): one CTA of up to kWideRowThreads
//                                     threads a row, kWideTileValues a thread
//   longer                         -> kBlock with a cluster of up to 8 CTAs per row, still
//                                     read once into registers; past that, several tiles per
//                                     thread, extra tiles parked in shared memory (16-CTA
//                                     clusters where that keeps the row on chip), then re-read
//                                     via L2 (or, per reread_above_words_for, small tiles re-read via
//                                     L2 in place of clusters and the stash)
//   (one-input ops, RowKernelLimits::staged)  -> kStaged: the whole row in shared memory, one
//                                     CTA a row or a cluster's shares (row_staged.cuh), any alignment
//   longer than a cluster's registers, with a workspace -> split rows (RowSplitConfig): the row
//                                     is cut into chunks, one CTA each, all CTAs of a
//                                     cooperative grid resident at once; each chunk stays in
//                                     shared memory while the row's chunk statistics meet in
//                                     the workspace, so x is read from memory once
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace reducekit {

// Registers per thread for a tile's values in the accumulation type (float64 takes two per
// value, each input its own): the planner's cap, and the largest tile the kernels instantiate.
constexpr int kRowTileWords = 64;
// Re-read rows (RowKernelLimits::reread_above_words): tiles of this many words a thread, or,
// for rows of RowKernelLimits::reread_small_tiles_from_bytes, of kRereadSmallTileWords (at
// least one vector).
constexpr int kRereadTileWords = 16;
constexpr int kRereadSmallTileWords = 4;
// ... and rows of at most this many bytes (all inputs): one CTA a row leaves the SMs idle where
// such long rows come few to a batch (LOG.md), so longer rows keep their clusters.
constexpr int64_t kRereadMaxRowBytes = int64_t(1) << 20;
// The vectors a thread of a re-read tile of `words` words holds (at least one): the planner's
// choice and the kernel the launcher instantiates for it.
constexpr int reread_vpt(int words, int vec, int acc_words, int inputs) {
  return words / (vec * acc_words * inputs) > 1 ? words / (vec * acc_words * inputs) : 1;
}

enum class RowKernelKind { kWarp, kBlock, kStaged, kWide };

// Wide rows (RowKernelLimits::wide_rows): one CTA of up to kWideRowThreads threads a row, each
// holding kWideTileValues values (one input), for rows a kMaxBlockThreads CTA would hold only at
// 16 values a thread or more (the band per family: RowKernelLimits): most of an SM's registers
// on one row, loaded once, no cluster and no second read (LOG.md).
constexpr int kWideRowThreads = 1024;
// The one-statistic packed kernel's middle form (RowKernelLimits::wide_mid_max_threads): CTAs of
// up to this many threads, two an SM, 40 registers a thread.
constexpr int kWideMidRowThreads = 768;
// Its roomy form (64 registers) runs two CTAs an SM up to this many threads, one past it.
constexpr int kWideRoomyPairThreads = 512;
// The packed wide kernels' register budget a thread (RowKernelConfig::wide_form). kBase: the
// kernel's own (two-phase ops 64; one-statistic ops 32, two 1024-thread CTAs an SM). kLean: 48,
// two-phase ops (one more row an SM). kMid: 40, one-statistic ops (two CTAs of up to
// kWideMidRowThreads). kRoomy: 64 (one-statistic ops: two CTAs of up to 512 threads, one of 1024;
// two-phase ops: their base). A form an op's kernel lacks runs as its base.
enum class WideForm : int { kBase, kLean, kMid, kRoomy };
constexpr int kWideTileValues = 32;

// Warp rows: at most kWarpMaxElems values a lane (all inputs together: short rows stay
// latency-light), in at most kMaxWarpVectors vectors, a power of two.
constexpr int kWarpMaxElems = 16;
constexpr int kMaxWarpVectors = 4;
constexpr int row_warp_max_vpt(int elem_bytes, int inputs) {
  const int vpt = kWarpMaxElems / ((elem_bytes < 16 ? 16 / elem_bytes : 1) * inputs);
  return vpt < 1 ? 1 : vpt > kMaxWarpVectors ? kMaxWarpVectors : vpt;
}

// The largest cluster every sm_90 device launches without opting in, and with it (non-portable).
constexpr int kPortableClusterSize = 8;
constexpr int kMaxClusterSize = 16;
// Static shared memory a row kernel may keep beside the planned dynamic bytes (reduction slots,
// cluster slots, mbarriers): the planner's per-CTA budget is the device's opt-in less this.
constexpr std::size_t kRowKernelStaticSmemBytes = 2048;

// Staged rows (row_staged.cuh): CTAs of kStagedThreads or kStagedSmallThreads threads, each
// staging a share of `vectors` 16-byte vectors of one row in shared memory that mirrors the row's
// granules (a spare granule before the share, two after), a cluster of CTAs a row where one
// CTA's share would be too big.
constexpr int kStagedThreads = 512;
constexpr int kStagedSmallThreads = 256;
constexpr std::size_t staged_share_smem_bytes(int64_t vectors) { return std::size_t(vectors + 3) * 16; }
// Granules one bulk copy (and one mbarrier) moves: the first pass starts on a chunk as soon as it
// lands. A CTA's share takes at most kStagedMaxChunks of them (256 KiB; sm_90 stages 227 KiB).
constexpr int kStagedChunkGranules = 512;
constexpr int kStagedMaxChunks = 32;

// One band of staged rows: one-input rows of more than min_row_bytes and at most max_row_bytes,
// in CTAs of `threads` threads, each staging at most share_bytes of the row (longer rows: the
// fewest CTAs, a cluster of at most kPortableClusterSize). threads 0: an unused band.
struct StagedBand {
  std::size_t min_row_bytes = 0;  // exclusive
  std::size_t max_row_bytes = 0;  // inclusive
  int threads = 0;
  std::size_t share_bytes = 0;
  // Only lengths that are not a multiple of the 16-byte vector (rows that cannot all start
  // aligned): the others take the register rows. A function of the length, as every plan is.
  bool ragged_lengths_only = false;
};
constexpr int kMaxStagedBands = 4;

struct RowKernelLimits {
  int max_cluster = kMaxClusterSize;            // CTAs per cluster (8 portable, 16 on sm_90 non-portable)
  int max_block_threads = 512;                  // CTA size cap for kBlock rows (the kernels' bound)
  std::size_t max_smem_per_block = 227 * 1024;  // opt-in dynamic shared memory per CTA
  // Planner knobs: the defaults (and row_policy's) ship; a sweep overrides them by name
  // (reducekit/tuning.hpp, applied in row_kernel_limits).
  int block_elems = 32;        // values (elements x inputs) a thread takes while a row fits one
                               // CTA that way: amortizes the per-row reduction over many values
  int min_block_threads = 64;  // smallest CTA for kBlock rows
  bool ring = true;            // 16-bit one-CTA rows loop with the next rows in shared memory
  std::size_t ring_min_tile_bytes = 0;  // ... when a CTA's tile is at least this big (set per op)
  bool two_phase = true;       // one-tile rows of kTwoPhase ops reduce two plain statistics
  // Stream rows read twice from global memory keep their first read in L2 (RowKernelConfig::
  // l2_hints) from this many bytes a row, where the second read then hits; layer_norm's policy
  // hints every row.
  std::size_t l2_hints_from_bytes = 64 * 1024;
  int max_tile_values = kRowTileWords;  // values a thread (elements x inputs x accumulation
                                        // words) of one-tile rows; below it, rows take clusters
  // Split rows (RowSplitConfig); sm_count 0 (unknown) plans none. row_kernel_limits fills in
  // the device's values; the split_* knobs are tuning knobs like the ones above.
  int sm_count = 0;
  std::size_t max_smem_per_sm = 228 * 1024;
  int split_chunk_tiles = 2;        // tiles (kRowSplitThreads x kRowSplitVpt vectors) a chunk
  int split_ring = 3;               // chunk buffers a CTA cycles through (loads run ahead)
  // Rows a cluster of at least this many CTAs holds in registers split as well (splitting gained
  // from 6-CTA clusters up, not below).
  int split_min_cluster = 5;
  // Only rows of elements this small split: float32 rows lose against the stream kernel, whose
  // 16 CTAs a row then hold the whole row on chip.
  int split_max_elem_bytes = 2;
  // Rows of at least this many bytes (all inputs) that the split CTAs' shared memory cannot take
  // (their dtype, or more chunks than resident CTAs) split re-read (RowSplitConfig::reread)
  // instead of streaming on one 16-CTA cluster, which leaves most SMs idle. 0: never. 4 MiB:
  // float32 rows of 2^20 gain; 2 MiB rows did not.
  int64_t split_reread_from_bytes = int64_t(4) << 20;
  // Re-read chunks are at least this many tiles (4 beat 2), and larger where a row would
  // otherwise have more chunks than the device keeps CTAs resident.
  int split_reread_min_chunk_tiles = 4;
  // Re-read rows: rows longer than one CTA's register tile (up to kRereadMaxRowBytes), and
  // one-CTA rows of more than this many words a thread (0: none), take small tiles
  // (kRereadTileWords words a thread) on the stream kernel, no stash, no cluster (a row one such
  // tile covers takes the block kernel):
  // the first pass folds the row, the second reads it again (from L2, just read) to write it.
  // Few registers a thread, so several CTAs an SM overlap their rows' reductions, as
  // torch.compile's norm kernels do. Set per op family and element size by
  // reread_above_words_for (below); the reread_above_words override replaces it (0: never,
  // kRereadPastOneCta: only rows past one CTA). The split path, where planned, still takes the
  // row when the caller gives a workspace, unless reread_over_split (below).
  int reread_above_words = 0;
  // Past one CTA, re-read only rows whose length is not whole 16-byte vectors (every other row
  // starts shifted off its vectors): set for float32 layer_norm and residual rows, whose shifted
  // held clusters ran far below their aligned twins while aligned rows lost on re-reading (LOG.md).
  bool reread_ragged_lengths_only = false;
  // Re-read rows of at least this many bytes (all inputs) take tiles of kRereadSmallTileWords
  // (one 16-byte vector a thread) on CTAs held to 32 registers, four an SM, as torch.compile's
  // norm kernels run (512-1024 threads of 32-64 registers, the second pass re-reading from L1 /
  // L2); the norms gain, softmax and the backwards tie. Shorter rows keep kRereadTileWords (50 KB
  // float32 rows in 7 such tiles, the last a quarter full, lost; LOG.md). The
  // reread_small_tiles_from_bytes override replaces it.
  int64_t reread_small_tiles_from_bytes = int64_t(64) << 10;
  // ... and shorter rows too where the last kRereadTileWords tile would be under half full (most
  // of its threads idle through a tile's load): set for float32 layer_norm, where 16-bit tied
  // (LOG.md).
  bool reread_small_tiles_for_short_last = false;
  // Re-read rows of tiles of up to two vectors a thread load their tiles in groups (four float32
  // one-vector tiles, two of two; two 16-bit one-vector tiles) wholly inside the row, every load
  // of a group in flight before its first use, as torch.compile's unrolled loops have them
  // (layer_norm's shifted rows only, row_stream.cuh): 1, the first pass's whole tiles, the last
  // one too; 2, float32's output pass's re-read tiles as well, two at a time; 0, one tile's loads
  // at a time. The same bits at every level; row_policy sets it.
  int loads_ahead = 0;
  // Re-read rows leave the split plan out, so they re-read even where the caller gives a
  // workspace: set for the norm forwards, whose 16-bit 256x262144 rows ran faster re-read than
  // split; softmax's split rows won there (LOG.md).
  bool reread_over_split = false;
  // Re-read rows park up to this many bytes of their tiles (all but the last) in shared memory,
  // arriving by bulk copies, so their second pass reads shared memory instead of L2 and the
  // first has the whole stash in flight at once. 0: none (both passes read global memory).
  std::size_t reread_stash_bytes = 0;
  // Rows of more than wide_above_threads (0: max_block_threads) and at most wide_max_threads
  // tiles of kWideTileValues values (one input, 16- and 32-bit elements) take the wide rows:
  // lengths of whole vectors ahead of the staged bands, ragged ones (where wide_ragged) where no
  // band takes them (set per family by row_policy).
  // Whole rows (every thread's values inside the row) take them from wide_whole_above_threads
  // where that is set (0: wide_above_threads): their body runs without bounds.
  bool wide_rows = false;
  int wide_above_threads = 0;
  int wide_whole_above_threads = 0;
  int wide_max_threads = kWideRowThreads;
  // Rows that are not whole take them only up to this many threads (0: wide_max_threads).
  int wide_partial_max_threads = 0;
  // Two-input rows whose ops hold only the inputs' rounded sum (the fused residual norms' s) take
  // them as one-input rows (the tile holds s). Set per family by row_policy.
  bool wide_input_sums = false;
  bool wide_ragged = true;
  // Packed wide rows (16-bit whole vectors) in CTAs of at most this many threads run on fewer
  // registers a thread (WideForm::kLean, two-phase ops): a few bytes more spill, one more row an
  // SM. 0: none. Set per family by row_policy.
  int wide_lean_max_threads = 0;
  // Packed wide rows of one-statistic ops (rms_norm) in CTAs of at most this many threads run on
  // 64 registers a thread (row_wide_packed_kernel_ext's roomy form: two CTAs of up to 512 threads
  // an SM, one of 1024) instead of 32 (two 1024-thread CTAs), where a bias spilled. 0: none. Set
  // per family by row_policy.
  int wide_roomy_max_threads = 0;
  // Whole rows (every thread's values inside the row) of at most this many threads run the 64-
  // register form of either packed kernel (two-phase ops: the full kernel even where the lean one
  // would run; one-statistic ops: the roomy one): only there does the whole-row body, free of
  // bounds, run without spilling. 0: none. Set per family by row_policy.
  int wide_whole_roomy_max_threads = 0;
  // Those of at most this many threads (at most kWideMidRowThreads) that the two limits above
  // leave off the roomy form, or put on it one CTA an SM (past kWideRoomyPairThreads), run on 40
  // registers (the middle form: two CTAs of up to 768 threads an SM), where a bias spilled 80-84
  // bytes at 32 and nothing at 40 (ptxas). 0: none. Set per family by row_policy.
  int wide_mid_max_threads = 0;
  // float32 wide rows whose 32-value CTA would have more than this many threads run on
  // kWideRowThreads-thread CTAs at fewer values a thread (5-8 vectors of 4): more warps an SM for
  // the one row it holds. 0: none. Set per family by row_policy.
  int wide_fill_above_threads = 0;
  // Streamed rows of ops whose second output is the value they normalize (the fused residual
  // norms' s = x + residual) write it in the first pass and read it back, one array instead of
  // the op's two inputs, in the second (row_stream.cuh). Set per family by row_policy.
  bool read_back_second = false;
  // Rows staged (kStaged) by band; set per family and element size by staged_bands_for (below).
  std::array<StagedBand, kMaxStagedBands> staged{};
};

// The ops' reread_stash_bytes: two such CTAs fit an SM.
constexpr std::size_t kRereadStashBytes = 110 * 1024;

// reread_above_words that re-reads only rows past one CTA (no one-CTA tile is larger).
constexpr int kRereadPastOneCta = kRowTileWords;

// The row op families whose plans were measured apart (bench/results/LOG.md).
enum class RowFamily {
  kRowwise,             // softmax, log_softmax and their backwards
  kLayerNormForward,    // layer_norm without a residual
  kRmsNormForward,      // rms_norm without a residual or a bias
  kRmsNormBiasForward,  // rms_norm with a bias, without a residual
  kResidualLayerNormForward,  // layer_norm of x + residual
  kResidualRmsNormForward,    // rms_norm of x + residual, with or without a bias
  kNormBackward,              // layer_norm / rms_norm backward
};

constexpr bool is_residual_family(RowFamily family) {
  return family == RowFamily::kResidualLayerNormForward || family == RowFamily::kResidualRmsNormForward;
}

// Tiles of 1, 2, 4, 8 or 16 vectors a thread, as a set: bit v stands for v vectors.
constexpr unsigned row_vpt_bit(int vpt) { return vpt >= 1 && vpt <= 16 ? 1u << vpt : 0u; }
constexpr bool has_row_vpt(unsigned set, int vpt) { return (set & row_vpt_bit(vpt)) != 0; }

// The tiles the launcher (src/ops/row_launch.cuh) builds kernels for, by kernel: every tile
// another kernel would hold is compile time spent on a kernel no plan runs. Streamed rows (tiles
// > 1) always have their three (the largest tile, the two re-read tiles).
struct RowTiles {
  unsigned warp = 0;     // kWarp rows (every lane count)
  unsigned ring = 0;     // one-CTA 16-bit rows looping with a shared-memory ring
  unsigned block = 0;    // one-CTA rows
  unsigned cluster = 0;  // rows held in a cluster's registers
  unsigned wide = 0;     // wide rows (kWideRowThreads CTAs)
};

// A family's tiles for rows of `elem_bytes` elements and `inputs` inputs: exactly those its
// shipped plans (row_policy, on devices of 99 to 227 KB of shared memory a CTA) and the tests'
// overrides reach, as test_row_kernel_plan.cpp checks both ways. norm backward rows short enough
// for warp rows or one-vector tiles always take the fused kernel (norm_backward_plan.hpp).
// A sweep that overrides the tile choices needs the REDUCEKIT_ALL_ROW_TILES build.
constexpr RowTiles row_tiles(RowFamily family, int elem_bytes, int inputs) {
  constexpr unsigned v1 = row_vpt_bit(1), v2 = row_vpt_bit(2), v4 = row_vpt_bit(4), v8 = row_vpt_bit(8),
                     v16 = row_vpt_bit(16);
  constexpr unsigned filled = row_vpt_bit(5) | row_vpt_bit(6) | row_vpt_bit(7);  // wide_fill_above_threads
  const int warp_vpt = row_warp_max_vpt(elem_bytes, inputs);
  RowTiles t;
  if (family != RowFamily::kNormBackward) t.warp = v1 | (warp_vpt >= 2 ? v2 : 0u) | (warp_vpt >= 4 ? v4 : 0u);
  const bool narrow = elem_bytes == 2, doubles = elem_bytes == 8;
  switch (family) {
    case RowFamily::kRowwise:
      if (inputs == 1) {
        if (narrow) t.ring = v8, t.block = v1 | v2 | v4 | v8;
        else t.block = v1 | v4 | v8 | v16, t.cluster = v16;
      } else {
        if (narrow) t.ring = v2 | v4, t.block = v1 | v2 | v4;
        else t.block = v1 | v2 | v4 | v8, t.cluster = v8;
      }
      break;
    case RowFamily::kLayerNormForward:
      if (narrow) t.ring = v2, t.wide = v4;
      else if (doubles) t.block = v1 | v4 | v8 | v16, t.cluster = v16;
      else t.block = v4, t.cluster = v16, t.wide = v8 | filled;
      break;
    case RowFamily::kRmsNormForward:
    case RowFamily::kRmsNormBiasForward:
      // 16-bit rows with a bias (2-vector tiles, RowKernelLimits::block_elems) all take the ring.
      if (narrow) t.ring = v2 | v4 | v8, t.block = family == RowFamily::kRmsNormForward ? v1 | v2 : 0u, t.wide = v4;
      else if (doubles) t.block = v1 | v4 | v8 | v16, t.cluster = v16;
      else t.block = v4 | v8, t.cluster = v8 | v16, t.wide = v8 | filled;
      break;
    case RowFamily::kResidualLayerNormForward:
    case RowFamily::kResidualRmsNormForward:
      if (narrow) t.ring = v1 | v2 | v4, t.block = v1 | v4, t.wide = v4;
      else if (doubles) t.block = v1 | v2 | v4 | v8, t.cluster = v8;
      else t.block = v1 | v2 | v4 | v8, t.cluster = v8, t.wide = v8 | filled;
      break;
    case RowFamily::kNormBackward:
      if (narrow) t.ring = v4, t.block = v4;
      else t.block = v8, t.cluster = v8;
      break;
  }
  return t;
}

// The policy table: the planner settings a family ships for rows of `elem_bytes` elements (one
// reason an entry, row_kernel_plan.cpp). The device's limits come on top (row_kernel_limits in
// src/ops/row_launch.cuh); everything else a plan depends on is here.
RowKernelLimits row_policy(RowFamily family, int elem_bytes);

// The shipped reread_above_words of a family's rows of `elem_bytes` elements.
int reread_above_words_for(RowFamily family, int elem_bytes);

// The shipped staged rows (RowKernelLimits::staged) of a family's rows of `elem_bytes` elements.
std::array<StagedBand, kMaxStagedBands> staged_bands_for(RowFamily family, int elem_bytes);

// The cross-entropy's staged rows (16-bit and float32 logits alike, by bytes): the 16-bit
// softmax's bands, the second from the first's end; the step's (loss and gradient in one
// kernel) second band reaches the third, and a fourth takes rows past the third.
std::array<StagedBand, kMaxStagedBands> cross_entropy_staged_bands(bool step);

// The split-row path: rows whose plan streams several tiles per thread (RowKernelConfig::tiles
// > 1) are cut into `chunks` chunks of chunk_vectors() vectors (a function of the row length and
// dtype only, so results stay batch-invariant). Chunk j of row r is work item r * chunks + j;
// a cooperative grid of `grid` CTAs (at most the resident CTAs) takes items blockIdx.x,
// + gridDim.x, ...; chunks <= grid keeps it deadlock-free (row_split.cuh). Each CTA keeps
// `ring` chunk buffers of shared memory, loading the next items while it finishes one; a
// re-read split (`reread`: no buffers, ring 0) folds each chunk from global memory and reads it
// again to write it, with at most one chunk a row a resident CTA (`grid` = the SM count times
// kRereadSplitCtasPerSm) and tiles of reread_split_vpt vectors a thread.
struct RowSplitConfig {
  int chunks = 0;       // per row; 0: the row does not split
  int chunk_tiles = 0;  // tiles of threads x vpt vectors per chunk
  int vpt = 0;          // vectors per thread per tile
  int threads = 0;      // threads per CTA
  int ring = 0;         // chunk buffers per CTA
  int grid = 0;         // resident CTAs the plan assumes (the launch checks the real count)
  std::size_t smem_bytes = 0;  // dynamic shared memory per CTA: ring x chunk buffers
  bool reread = false;         // chunks read twice from global memory (ring 0, smem_bytes 0)
  int64_t chunk_vectors() const { return int64_t(threads) * vpt * chunk_tiles; }
};

struct RowKernelConfig {
  RowKernelKind kind = RowKernelKind::kWarp;
  int vec = 1;       // elements per 16-byte vector, the unit each thread owns
  int vpt = 1;       // vectors per thread per tile (a kernel template parameter)
  int lanes = 32;    // kWarp: threads per row
  int threads = 128; // threads per CTA
  int cluster = 1;   // kBlock: CTAs per row
  int tiles = 1;     // kBlock: register tiles each thread streams through
  int stash_tiles = 0;  // kBlock: tiles parked in shared memory between the two passes
  int ring = 0;      // kBlock, one tile: rows streaming into shared memory ahead of the one
                     // being reduced (0: tiles load straight into registers)
  std::size_t smem_bytes = 0;  // dynamic shared memory per CTA
  bool two_phase = true;       // kTwoPhase ops on one-tile, one-CTA rows: two plain reductions
                               // (max then sum, sum then squared deviations) instead of one merged
  bool l2_hints = false;       // kBlock stream rows: L2 eviction priorities on the two reads
  bool read_back_second = false;  // kBlock stream rows: RowKernelLimits::read_back_second
  int loads_ahead = 0;            // re-read rows: RowKernelLimits::loads_ahead
  WideForm wide_form = WideForm::kBase;  // kWide packed rows: RowKernelLimits::wide_*_max_threads
  RowSplitConfig split;        // used instead of the fields above when the caller gives a workspace

  // Elements one row's worth of threads covers: must be >= cols. (kStaged: `tiles` is the
  // vectors a thread strides over in its CTA's share, vpt 1.)
  int64_t capacity() const {
    const int64_t group = kind == RowKernelKind::kWarp ? lanes : int64_t(threads) * cluster;
    return group * vpt * vec * tiles;
  }
};

// Rows a looping CTA has streaming into shared memory ahead of the one it reduces.
constexpr int kRowRing = 2;

// Re-read rows' parked tiles (RowKernelLimits::reread_stash_bytes) arrive by bulk copies into
// buffers of one 16-byte granule more than the tile a slot (row_stream.cuh), each tile on its own
// barrier: at most this many.
constexpr int kMaxBulkStashTiles = 32;
constexpr std::size_t bulk_stash_tile_bytes(int threads, int vpt, int inputs) {
  return std::size_t(inputs) * vpt * (threads + 1) * 16;
}

// The split kernel's CTA and tile (row_split.cuh): 512 threads x 4 vectors of 16 bytes, 32 KB
// a tile in every dtype (values held in registers only while a tile is folded).
constexpr int kRowSplitThreads = 512;
constexpr int kRowSplitVpt = 4;
// Shared memory a split CTA needs besides its chunk buffers (reduction slots, the runtime's
// per-CTA reservation), for the planner's resident-CTA estimate.
constexpr std::size_t kRowSplitSmemReserve = 2048;
// Re-read split CTAs an SM (their __launch_bounds__ minimum): two, so one CTA's waits and merges
// overlap the other's loads. Their tiles take 16 words a thread (the 64 registers two CTAs allow;
// 32-word tiles spilled 172-316 bytes there): kRowSplitVpt vectors of float32 / float64 rows of
// one input, fewer where the vectors widen to more words (16-bit elements held as float32) or
// there are two inputs.
constexpr int kRereadSplitCtasPerSm = 2;
constexpr int reread_split_vpt(int elem_bytes, int inputs) {
  return 16 / ((elem_bytes >= 4 ? 4 : 8) * inputs);
}

constexpr int64_t kMaxRowLength = int64_t(1) << 30;  // keeps in-row vector indices in int

// `inputs`: arrays read per element (1 for forward ops, 2 for backward ops). Register tiles
// shrink with it so a thread's registers hold the same number of values.
RowKernelConfig plan_row_kernel(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits);

// Workspace of a split-row launch over `rows` rows with statistics of `stat_bytes` bytes: one
// arrival counter per row (`zeroed_bytes`, zero on entry and left zero), then the chunk
// statistics [rows][chunks]. Both 0 when the plan does not split.
struct RowSplitWorkspace {
  std::size_t bytes = 0;
  std::size_t zeroed_bytes = 0;
};
RowSplitWorkspace row_split_workspace(const RowKernelConfig& c, int64_t rows, std::size_t stat_bytes);

}  // namespace reducekit
