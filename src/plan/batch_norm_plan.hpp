// SPDX-License-Identifier: Apache-2.0
// How batch_norm's kernels (src/kernels/batch_norm.cuh) cover x: the layout, the vector width
// and the CTAs' share of every channel. A pure function of the shape, the element size, the
// pointers' alignment and the device's SM count (the statistics pass is one wave): the order in
// which a channel's statistics are merged, and so every bit of the result, is the same on every
// GPU of one model, run after run.
//
//   channels-first [N, C, S]: a channel is N runs of S contiguous elements, cut into chunks of
//     whole unrolled rounds; thread t reads the vectors at t, t + 256, ... of a chunk.
//   channels-last [N * S, C]: a row of C channels a position. A tile is tile_vectors vectors of
//     a row (W); a chunk is a stretch of rows; thread t reads vector t % W of rows t / W,
//     t / W + 256 / W, ... of the chunk.
//
// Three kernels: the statistics pass runs stats_ctas CTAs a tile, at most two an SM in all (one
// wave): CTA r folds chunks r, r + stats_ctas, ... into one partial a channel. The finalize pass
// merges each channel's partials in a fixed order (a warp a channel). The apply pass (y, or dx)
// runs one short CTA a chunk, in reverse order, so that the chunks the statistics pass read last,
// still in L2, are read again first.
//
// The single-read path (plan_batch_norm_resident) replaces all three where a channels-first
// channel fits in the shared memory of a cluster of at most 4 CTAs: each CTA stages its share of
// the channel (whole runs, or runs cut into `parts` pieces) in shared memory, folds it, the
// cluster merges its CTAs' statistics in rank order through distributed shared memory, and each
// CTA writes y (or dx) from its shared copy. x (and dy) are read once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plan/launch_limits.hpp"
#include "reducekit/status.hpp"

namespace reducekit {

constexpr int kBatchNormThreads = 256;
// Vectors a thread loads before it uses them: 64 bytes' worth (the forward's statistics pass, two
// CTAs an SM, twice that), at most 8 loads (scalar rows, whose per-load offsets cost registers).
constexpr int batch_norm_unroll(int vec, int elem_size) { return 64 / (vec * elem_size) < 8 ? 64 / (vec * elem_size) : 8; }
constexpr int kBatchNormStatsUnrollFactor = 2;
// x a chunk: short CTAs keep the apply pass's last wave short.
constexpr int64_t kBatchNormChunkBytes = 32 * 1024;
// Statistics CTAs an SM (their __launch_bounds__ minimum).
constexpr int kBatchNormStatsCtasPerSm = 2;

enum class BatchNormLayout : int8_t { kChannelsFirst, kChannelsLast };

struct BatchNormPlan {
  BatchNormLayout layout = BatchNormLayout::kChannelsFirst;
  int64_t n = 0, c = 0, s = 0;  // x as [n, c, s]
  int vec = 1;                  // elements a load: 16 bytes where alignment allows, else 1
  int tile_vectors = 1;         // channels-last: vectors of a row a tile covers (power of two <= 32)
  int64_t tiles = 0;            // channels-first: c; channels-last: tiles of tile_vectors * vec channels
  int64_t chunk = 0;            // channels-first: elements of a channel a CTA covers; channels-last: rows
  int64_t chunks = 0;           // chunks a tile (apply CTAs)
  int64_t stats_ctas = 0;       // statistics CTAs a tile
  // The kernels' walks (batch_norm.cuh, ChunkWalk) step without dividing: what a thread's step
  // (the CTA's 256 threads' vectors further on) and a statistics thread's jump (stats_ctas chunks
  // further on) add to its element offset in x and, channels-first, to its place in the run (a
  // place at or past s wraps: s less, and wrap_offset more on the offset). 0 where s is 0.
  int64_t step_in_run = 0, step_offset = 0, wrap_offset = 0, jump_in_run = 0, jump_offset = 0;
  int64_t channel_count() const { return n * s; }  // values a channel's statistics are over
  int64_t ctas() const { return tiles * chunks; }
  int64_t stats_grid() const { return tiles * stats_ctas; }
  // Workspace (none of it needs zeroing): partials [c][stats_ctas][2], then the apply
  // parameters [4][c] (a row a parameter), in the accumulation type.
  std::size_t workspace_bytes = 0;
  std::size_t params_offset = 0;
};

// Channels-first planes of few bytes (a 7x7 map's run is 98 bf16 bytes: no whole vectors, and
// 12544-value channels that the single-read kernel walks a run at a time) may be read as columns:
// x as the matrix [N, C * S], a column a (channel, place) pair, on the channels-last kernels
// (16-byte vectors along a sample's C * S values); the finalize kernel then merges each channel's
// S columns (BatchNormArgs::segment). Taken, in place of the single-read and channels-first
// plans, where a plane has fewer than `below_bytes` bytes (the tuning setting
// batch_norm_column_plane_bytes; kBatchNormColumnPlaneBytes ships, 0: never), s > 1, and the
// pointers and C * S allow whole 16-byte vectors. `columns`: the plan of that matrix. 256 bytes
// takes 7x7 maps in every dtype and leaves 14x14 (392 bf16 bytes), which ran slower as columns.
constexpr int64_t kBatchNormColumnPlaneBytes = 256;
bool plan_batch_norm_columns(const BatchNormPlan& plan, int elem_size, int acc_size, bool base_aligned16,
                             int sm_count, int64_t below_bytes, BatchNormPlan* columns);

// The single-read layout: CTA k of a channel's cluster holds pieces [k * pieces_per_cta,
// (k + 1) * pieces_per_cta) of the channel's n * parts pieces (piece i: run i / parts, elements
// [(i % parts) * piece, ...) of it, at most `piece` of them). A piece's shared-memory slot mirrors
// the 16-byte granules of global memory it touches (slot_granules of them, one more than a piece
// needs when it starts on a granule boundary), so any alignment moves as aligned 16-byte copies.
struct BatchNormResidentPlan {
  int cluster = 0;             // CTAs a channel (1 .. kBatchNormResidentClusterLimit); 0: not resident
  int64_t pieces = 0;          // pieces a channel: n * parts
  int64_t parts = 1;           // pieces a run
  int64_t piece = 0;           // elements of a piece (the run's last piece may be shorter)
  int64_t pieces_per_cta = 0;  // the last CTA's share may be shorter, never empty
  int64_t slot_granules = 0;
  std::size_t smem_bytes = 0;  // a CTA's slots, for every staged input
  int group = 0;               // lanes that walk a piece together: a power of two <= 32
};
// The largest cluster planned: larger ones (whole CTAs waiting on one another, few waves) ran
// slower than the three passes on the H200.
constexpr int kBatchNormResidentClusterLimit = 4;
// Shared memory a CTA may stage, in the order tried: three, then two CTAs an SM (228 KiB an SM on
// sm_90). More CTAs an SM let one CTA's loads overlap another's stores; one CTA an SM ran slower
// than the three passes.
constexpr std::size_t kBatchNormResidentTiers[] = {72 * 1024, 108 * 1024};
// Threads a CTA: 512 (two or three CTAs an SM).
constexpr int kBatchNormResidentThreads = 512;

// The single-read layout of a channels-first plan for `inputs` staged tensors (1: the training
// forward's x; 2: the backward's x and dy): the smallest tier, then the smallest cluster (up to
// kBatchNormResidentClusterLimit), then the fewest pieces a run that fit. cluster == 0 where nothing fits (or the plan is channels-last,
// or `alignment_shared` is false: the outputs and inputs must sit at one offset from a 16-byte
// boundary, since a slot mirrors the granules of all of them).
BatchNormResidentPlan plan_batch_norm_resident(const BatchNormPlan& plan, int elem_size, int inputs,
                                               bool alignment_shared);

// x: `rank` sizes and strides (in elements), [N, C, *spatial] with rank 2..5; elem_size: bytes
// of an element; acc_size: bytes of the accumulation type; base_aligned16: whether the data
// pointers are multiples of 16 bytes; sm_count: the device's SMs (the statistics CTAs, and so
// the merge order, depend on it: results are deterministic on a given GPU model).
// kInvalidArgument for ranks or sizes batch_norm does not take; kUnsupported for a layout that
// is neither dense channels-first nor dense channels-last.
Status plan_batch_norm(int rank, const int64_t* sizes, const int64_t* strides, int elem_size, int acc_size,
                       bool base_aligned16, int sm_count, BatchNormPlan* plan);

// The values of a channel that statistics CTA r of its tile folds: chunks r, r + stats_ctas, ...
// of `chunk` values each, all whole but the tile's last (a channel holds `values` of them). The
// finalize pass weighs CTA r's partial by it.
constexpr int64_t batch_norm_stats_values(int64_t chunks, int64_t stats_ctas, int64_t chunk, int64_t values,
                                          int64_t r) {
  if (r >= chunks) return 0;
  const int64_t taken = (chunks - r + stats_ctas - 1) / stats_ctas;
  const int64_t short_by = (chunks - 1) % stats_ctas == r ? chunks * chunk - values : 0;
  return taken * chunk - short_by;
}

// Inference over channels-first x as one flat array of 16-byte vectors (batch_norm.cuh's flat
// kernel) rather than plane by plane: planes of at least a vector that are not whole vectors (the
// chunked kernel reads those an element at a time) or take at most kBatchNormFlatMaxPlaneBytes;
// larger planes of whole vectors keep the chunked kernel, faster there in 16-bit (LOG.md). Below
// 2^50 elements (the flat kernel's divisions by reciprocal are exact there) and within a grid
// CUDA launches. The caller checks that x and y sit on 16-byte boundaries.
constexpr int64_t kBatchNormFlatMaxPlaneBytes = 8192;
constexpr int kBatchNormFlatUnroll = 4;  // vectors a thread: 64 bytes in flight
// The flat kernel's CTAs for `total` elements of `elem_size` bytes.
constexpr int64_t batch_norm_flat_grid(int64_t total, int elem_size) {
  const int64_t per_cta = int64_t(kBatchNormThreads) * kBatchNormFlatUnroll * (16 / elem_size);
  return total / per_cta + (total % per_cta != 0 ? 1 : 0);
}
inline bool batch_norm_inference_flat(const BatchNormPlan& plan, int elem_size) {
  const int64_t vec = 16 / elem_size, total = plan.n * plan.c * plan.s;
  return plan.layout == BatchNormLayout::kChannelsFirst && total > 0 && total < (int64_t(1) << 50) &&
         batch_norm_flat_grid(total, elem_size) <= kMaxGridX && plan.s >= vec &&
         (plan.s % vec != 0 || plan.s * elem_size <= kBatchNormFlatMaxPlaneBytes);
}

// The workspace of a SyncBatchNorm call (reducekit_nccl): the single-GPU workspace
// (`local_bytes`, batch_norm_requirements) rounded up to 16 bytes, then every rank's packet,
// [ranks][channels][kSyncBatchNormPacketWidth] float64, which one in-place allgather fills.
constexpr int kSyncBatchNormPacketWidth = 3;  // reducekit::kBatchNormPacketWidth
struct SyncBatchNormWorkspace {
  std::size_t packets_offset = 0;  // where rank 0's packet starts
  std::size_t packet_bytes = 0;    // one rank's packet
  std::size_t bytes = 0;           // the whole workspace
};
// kInvalidArgument (naming `comm`) for ranks < 1; kUnsupported where the size overflows.
Status plan_sync_batch_norm_workspace(std::size_t local_bytes, int ranks, int64_t channels,
                                      SyncBatchNormWorkspace* plan);

}  // namespace reducekit
