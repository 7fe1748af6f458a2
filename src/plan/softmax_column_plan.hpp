// SPDX-License-Identifier: Apache-2.0
// Softmax family over a dim that is not innermost, on a dense (contiguous) tensor, read in place:
// x is viewed as [outer, K, inner] (K = the dim's size, inner = the product of the dims after it)
// and every (outer, inner) position is a column of K values inner elements apart.
//
// One CTA owns a tile of K x width columns of one slab (one outer index):
//
//            width = col_vectors * vec columns (16-byte vectors of the inner extent)
//            w ->  0     1     2   ...  W-1          thread t = r * W + w:
//   k = 0        [vec ][vec ][vec ]... [vec ]  r = 0   column vector w, rows k = r, r + R, ...
//   k = 1        [    ][    ][    ]... [    ]  r = 1   (R = k_lanes = threads / W)
//   ...                                                 each lane folds its rows U at a time, then
//   k = K-1      [    ][    ][    ]... [    ]          the R lanes of a column meet in a fixed tree
//
// staged: the tile (every input) fits shared memory, so x is read once (copied into shared memory,
// then the statistics and the outputs read it from there); otherwise a statistics pass and an
// output pass each read x from memory (two reads). Where two staged tiles fit a CTA the plan says
// so (buffers = 2): resident CTAs then loop over tiles, the next tile's copy running while the
// current one is reduced and written; the launcher keeps one where two would cost a resident CTA.
// Where even the narrowest tile passes kColumnSplitFromBytes, a cluster of `split` CTAs shares
// it, each staging a band of ceil(K / split) rows, and the CTAs merge their statistics in rank
// order: each holds a fraction of the tile, so several CTAs an SM overlap one's copy with
// another's work. Tiles of 32-byte rows then widen to 64-byte rows wherever a cluster's
// bands of them still fit kColumnSplitFromBytes (kColumnWideVectors).
//
// The arithmetic of a column (which lane folds which rows, the tree) depends on (K, element size,
// inputs) alone, never on outer, inner, the alignment or the other columns, so results are
// deterministic and batch-invariant. Plain C++17 (no CUDA), unit-tested everywhere.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

// Threads of one column CTA: 8 warps leave room for 4+ staged CTAs an SM.
constexpr int kColumnSoftmaxThreads = 256;
// A staged tile aims at this many bytes (all inputs): 3-4 CTAs an SM overlap one's copy-in with
// another's compute and stores.
constexpr std::size_t kColumnStageTargetBytes = 48 * 1024;
// ... and a lone CTA's may grow to this where even the narrowest tile (kColumnMinVectors) is
// bigger and does not split (kColumnSplitFromBytes, or the column_max_split override): one read
// with 1-2 CTAs an SM still beats reading x twice. Two-input tiles (the backwards) keep 100 KiB:
// not measured past it.
constexpr std::size_t kColumnStageMaxBytes = 128 * 1024;
constexpr std::size_t kColumnStageMaxBytesTwoInputs = 100 * 1024;
// Narrowest tile: 2 vectors (32 bytes, one DRAM sector) a row of K; narrower would fetch sectors
// half used.
constexpr int kColumnMinVectors = 2;
// Most CTAs a split tile takes (a portable cluster).
constexpr int kColumnMaxSplit = 8;
// Narrowest tiles up to this stay whole on one CTA: three still fit an SM and overlap without a
// cluster's barriers, which cost more than they gain there; larger ones, one or no lone CTA an
// SM, split (LOG.md).
constexpr std::size_t kColumnSplitFromBytes = 64 * 1024;
// Two-read tiles are as narrow: 4x the CTAs of full-line tiles where outer * inner is small, and
// the tiles in flight (2 CTAs an SM x K x 32 bytes, 34 MB at K = 4096 float32) may still sit in L2
// when the output pass reads them again.
constexpr int kColumnStreamVectors = kColumnMinVectors;
// Staged tiles narrower than this (32-byte rows) widen to it, 64-byte rows, wherever a CTA's band
// of the wider tile, lone or split, stays within kColumnSplitFromBytes: 32-byte rows cost an L2
// request a sector and ran L2-bound (L2 84-95% busy at DRAM 41-70%; LOG.md). One width for
// forwards and backwards: 128-byte rows lose forward where they need a cluster the 64-byte ones
// do not.
constexpr int kColumnWideVectors = 4;

// [outer, K, inner] of a dense tensor over `dim`, when dim is not innermost (inner > 1).
struct ColumnExtents {
  int64_t outer = 1;
  int64_t reduced = 1;  // K
  int64_t inner = 1;
};

// True when x is dense row-major (size-1 dims may have any stride) with inner > 1 after `dim`
// (already wrapped, 0 <= dim < rank) and has at least one element.
bool dense_column_extents(const TensorView& x, int dim, ColumnExtents* extents);

struct SoftmaxColumnPlan {
  ColumnExtents ext;
  int vec = 1;           // elements of one 16-byte vector (16 / element bytes)
  int col_vectors = 1;   // W: vectors across a tile
  int k_lanes = 1;       // R: lanes down K per column vector (W * R = kColumnSoftmaxThreads)
  bool staged = false;   // the tile sits in shared memory: x read once
  int split = 1;         // CTAs (a cluster) a tile, each staging a band of K
  int64_t band = 1;      // rows of K a CTA: ceil(K / split)
  int buffers = 1;       // staged tiles a CTA holds: 2 overlaps the next tile's copy with this one
  int64_t width = 1;     // columns a tile: col_vectors * vec
  int64_t tiles_per_slab = 0;  // ceil(inner / width)
  int64_t tiles = 0;           // outer * tiles_per_slab (each on split CTAs)
  std::size_t tile_bytes = 0;  // a CTA's band of the staged tile, all inputs (0 when not staged)
  std::size_t smem_bytes = 0;  // dynamic shared memory a CTA: buffers x tile + statistics + parameters
};

// The plan's constants as the column_* tuning settings override them (sweeps; each changes bits).
struct SoftmaxColumnOverrides {
  // The narrowest staged tile (a power of two from 1 to kColumnSoftmaxThreads; column_min_vectors:
  // 1 stages tiles of half a sector a row of K).
  int min_vectors = kColumnMinVectors;
  // The widest tile's bytes, and a split tile's bands' (1 KiB to kColumnStageMaxBytes;
  // column_stage_target_bytes).
  std::size_t target_bytes = kColumnStageTargetBytes;
  // The largest lone staged tile of min_vectors, 0 for the default of `inputs`
  // (kColumnStageMaxBytes, or kColumnStageMaxBytesTwoInputs; column_stage_max_bytes). It bounds
  // only the narrowest tile, taken where neither a wider one nor a split one fits the target: a
  // tile within the target stages whatever it says, and a min_vectors tile past it reads x twice.
  std::size_t stage_max_bytes = 0;
  // The most CTAs a tile (a power of two from 1 to kColumnMaxSplit; column_max_split, 1 for the
  // lone CTAs).
  int max_split = kColumnMaxSplit;
  // Staged tiles narrower than this widen to it where a band fits kColumnSplitFromBytes (a power of
  // two from 1 to kColumnSoftmaxThreads; column_wide_vectors, 1 for none), 0 for
  // kColumnWideVectors.
  int wide_vectors = 0;
};

// elem_bytes: 2, 4 or 8; inputs: 1 (forward) or 2 (backward); stat_bytes / param_bytes: the
// device statistic and parameter sizes of the op; max_smem_per_cta: the device's. The widest tile
// (at least min_vectors wide) within the target stages; past kColumnSplitFromBytes, the smallest
// split whose band fits the target at min_vectors, at the widest width that fits; else a lone
// tile of min_vectors up to stage_max_bytes; else two reads (a staged two-phase op's statistics
// are the exact ones, the two-read plan's the online merge). A staged tile narrower than
// wide_vectors then widens to it, on the fewest CTAs whose bands fit kColumnSplitFromBytes. The
// plan does not depend on the SM count, so a column's bits are the same on every GPU of the same
// shared memory.
// Errors (kInvalidArgument) name the argument that is out of range.
Status plan_softmax_columns(const ColumnExtents& ext, int elem_bytes, int inputs, int stat_bytes, int param_bytes,
                            std::size_t max_smem_per_cta, SoftmaxColumnPlan* plan,
                            const SoftmaxColumnOverrides& overrides = {});

}  // namespace reducekit
