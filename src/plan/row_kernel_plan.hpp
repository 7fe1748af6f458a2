// Chooses how the row engine (src/kernels/row_engine.cuh) lays a row of length `cols` onto
// threads. The choice depends only on the row length, the element size and the device
// limits -- never on the number of rows or the alignment of the tensor -- so a row's result
// does not change with the batch it sits in.
//
//   rows up to 16 elements a lane -> kWarp:  4..32 lanes per row, several rows per CTA
//   fits one CTA's registers       -> kBlock: one CTA per row, each thread holding vpt vectors;
//                                     CTAs loop over rows with the next rows streaming
//                                     into shared memory (ring)
//   longer                         -> kBlock with a cluster of up to 8 CTAs per row, still
//                                     read once into registers; past that, several tiles per
//                                     thread, extra tiles parked in shared memory (16-CTA
//                                     clusters where that keeps the row on chip), then re-read
//                                     via L2
#pragma once

#include <cstddef>
#include <cstdint>

namespace reducekit {

// Registers per thread for a tile's values in the accumulation type (float64 takes two per
// value, each input its own): the planner's cap, and the largest tile the kernels instantiate.
constexpr int kRowTileWords = 64;

enum class RowKernelKind { kWarp, kBlock };

struct RowKernelLimits {
  int max_cluster = 16;                         // CTAs per cluster (8 portable, 16 on sm_90 non-portable)
  int max_block_threads = 512;                  // CTA size cap for kBlock rows (the kernels' bound)
  std::size_t max_smem_per_block = 227 * 1024;  // opt-in dynamic shared memory per CTA
  // Planner knobs: the defaults ship; REDUCEKIT_TUNE_* environment variables override them
  // for benchmark sweeps (see row_kernel_limits).
  int block_elems = 32;        // values (elements x inputs) a thread takes while a row fits one
                               // CTA that way: amortizes the per-row reduction over many values
  int min_block_threads = 64;  // smallest CTA for kBlock rows
  bool ring = true;            // 16-bit one-CTA rows loop with the next rows in shared memory
  std::size_t ring_min_tile_bytes = 0;  // ... when a CTA's tile is at least this big (set per op)
  bool two_phase = true;       // one-tile rows of kTwoPhase ops reduce two plain statistics
  int max_tile_values = kRowTileWords;  // values a thread (elements x inputs x accumulation
                                        // words) of one-tile rows; below it, rows take clusters
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

  // Elements one row's worth of threads covers: must be >= cols.
  int64_t capacity() const {
    const int64_t group = kind == RowKernelKind::kWarp ? lanes : int64_t(threads) * cluster;
    return group * vpt * vec * tiles;
  }
};

// Rows a looping CTA has streaming into shared memory ahead of the one it reduces.
constexpr int kRowRing = 2;

constexpr int64_t kMaxRowLength = int64_t(1) << 30;  // keeps in-row vector indices in int

// `inputs`: arrays read per element (1 for forward ops, 2 for backward ops). Register tiles
// shrink with it so a thread's registers hold the same number of values.
RowKernelConfig plan_row_kernel(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits);

}  // namespace reducekit
