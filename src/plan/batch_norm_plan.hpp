// SPDX-License-Identifier: Apache-2.0
// How batch_norm's kernels (src/kernels/batch_norm.cuh) cover x: the layout, the vector width
// and the CTAs' share of every channel. A pure function of the shape, the element size and the
// base pointer's alignment, never of the device: the order in which a channel's statistics are
// merged (and so every bit of the result) is the same on every GPU.
//
//   channels-first [N, C, S]: a channel is N runs of S contiguous elements. A CTA takes one
//     channel and a contiguous stretch (a chunk) of its N * S elements, run by run;
//     thread t reads the vectors at t, t + 256, ... of the stretch.
//   channels-last [N * S, C]: a row of C channels a position. A CTA takes a tile of channels
//     (tile_vectors vectors of a row) and a chunk of rows; thread t reads vector t % W of
//     rows t / W, t / W + 256 / W, ... (W = tile_vectors).
//
// Every CTA of a tile writes its chunk's partial statistics; the last one to finish merges
// them in chunk order. The apply pass (y, or dx) walks the same CTAs in reverse, so the chunks
// read last, still in L2, are read again first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reducekit/status.hpp"

namespace reducekit {

constexpr int kBatchNormThreads = 256;
// Vectors a thread loads before it uses them: 64 bytes' worth, at most 8 loads (scalar rows,
// whose per-load offsets would otherwise cost the apply kernel its occupancy).
constexpr int batch_norm_unroll(int vec, int elem_size) { return 64 / (vec * elem_size) < 8 ? 64 / (vec * elem_size) : 8; }
// Enough CTAs for two waves of a 132-SM GPU, a constant so that the plan is the device's
// neither: more CTAs mean more partials for the last CTA of a tile to merge.
constexpr int64_t kBatchNormTargetCtas = 264;
// ... each with at least this much of x to read, so that small inputs keep a few big CTAs.
constexpr int64_t kBatchNormMinChunkBytes = 16 * 1024;

enum class BatchNormLayout : int8_t { kChannelsFirst, kChannelsLast };

struct BatchNormPlan {
  BatchNormLayout layout = BatchNormLayout::kChannelsFirst;
  int64_t n = 0, c = 0, s = 0;  // x as [n, c, s]
  int vec = 1;                  // elements a load: 16 bytes where alignment allows, else 1
  int tile_vectors = 1;         // channels-last: vectors of a row a tile covers (power of two <= 32)
  int64_t tiles = 0;            // channels-first: c; channels-last: tiles of tile_vectors * vec channels
  int64_t chunk = 0;            // channels-first: elements of a channel a CTA covers; channels-last: rows
  int64_t chunks = 0;           // CTAs a tile
  int64_t channel_count() const { return n * s; }  // values a channel's statistics are over
  int64_t ctas() const { return tiles * chunks; }
  // Workspace: tickets (zeroed), then partials [c][chunks][2] and per-channel parameters [c][4],
  // in the accumulation type.
  std::size_t ticket_bytes = 0;
  std::size_t workspace_bytes = 0;
  std::size_t partials_offset = 0, params_offset = 0;
};

// x: `rank` sizes and strides (in elements), [N, C, *spatial] with rank 2..5; elem_size: bytes
// of an element; acc_size: bytes of the accumulation type; base_aligned16: whether x's data
// pointer is a multiple of 16 bytes. kInvalidArgument for ranks or sizes batch_norm does not
// take; kUnsupported for a layout that is neither dense channels-first nor dense channels-last.
Status plan_batch_norm(int rank, const int64_t* sizes, const int64_t* strides, int elem_size, int acc_size,
                       bool base_aligned16, BatchNormPlan* plan);

}  // namespace reducekit
