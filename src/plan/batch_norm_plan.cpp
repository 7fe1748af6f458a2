// SPDX-License-Identifier: Apache-2.0
#include "plan/batch_norm_plan.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "plan/checked_mul.hpp"

namespace reducekit {
namespace {

// a >= 0, b > 0; no a + b - 1 to overflow where a nears int64's limit.
int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// Dense in the order given by `order` (innermost last); size-1 dims may have any stride.
bool dense_in_order(int rank, const int64_t* sizes, const int64_t* strides, const int* order) {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = order[i];
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// A chunk of about kBatchNormChunkBytes in whole rounds of `round` units (at least one round).
int64_t chunk_units(int64_t round, int64_t unit_bytes) {
  return std::max<int64_t>(1, kBatchNormChunkBytes / (round * unit_bytes)) * round;
}

}  // namespace

Status plan_batch_norm(int rank, const int64_t* sizes, const int64_t* strides, int elem_size, int acc_size,
                       bool base_aligned16, int sm_count, BatchNormPlan* plan) {
  if (rank < 2 || rank > 5)
    return Status::invalid_argument("x: batch_norm takes [N, C, *spatial] of rank 2 to 5, got rank " +
                                    std::to_string(rank));
  // The non-zero sizes' product must fit int64, so that s, n * s, n * c * s and every offset the
  // kernels compute do: a wrapped product can look small, negative or empty.
  int64_t nonzero = 1;
  for (int d = 0; d < rank; ++d) {
    if (sizes[d] < 0)
      return Status::invalid_argument("x: negative size " + std::to_string(sizes[d]) + " in dim " + std::to_string(d));
    if (sizes[d] != 0 && !checked_mul(nonzero, sizes[d], &nonzero))
      return Status::invalid_argument("x: the number of elements overflows int64");
  }
  BatchNormPlan p;
  p.n = sizes[0];
  p.c = sizes[1];
  p.s = 1;
  for (int d = 2; d < rank; ++d) p.s *= sizes[d];
  if (p.c == 0) return Status::invalid_argument("x: no channels (size 0 in dim 1)");

  int first[5], last[5];  // dim orders, innermost last
  for (int d = 0; d < rank; ++d) first[d] = d;
  last[0] = 0;
  for (int d = 2; d < rank; ++d) last[d - 1] = d;
  last[rank - 1] = 1;
  const bool is_first = dense_in_order(rank, sizes, strides, first);
  const bool is_last = dense_in_order(rank, sizes, strides, last);
  // An empty x is read nowhere, so any strides do: torch strides a size-0 dim as if it were size 1,
  // which no dense order matches (such an x is planned channels-first).
  const bool empty = p.n * p.c * p.s == 0;
  if (!is_first && !is_last && !empty)
    return Status::unsupported("x: neither contiguous nor channels-last; make it one of the two first");
  // One value a position (s == 1) is a [N, C] matrix: the channels-last kernels read its rows whole.
  p.layout = (is_last && (!is_first || p.s == 1)) ? BatchNormLayout::kChannelsLast : BatchNormLayout::kChannelsFirst;
  if (p.c == 1) p.layout = BatchNormLayout::kChannelsFirst;  // one channel: the whole tensor, run by run

  const int full_vec = 16 / elem_size;
  const int64_t inner = p.layout == BatchNormLayout::kChannelsFirst ? p.s : p.c;
  p.vec = (base_aligned16 && inner % full_vec == 0) ? full_vec : 1;

  const int64_t per_channel = p.channel_count();
  const int unroll = batch_norm_unroll(p.vec, elem_size);
  if (p.layout == BatchNormLayout::kChannelsFirst) {
    p.tiles = p.c;
    p.chunk = chunk_units(int64_t(kBatchNormThreads) * p.vec * unroll, elem_size);
  } else {
    const int64_t row_vectors = ceil_div(p.c, p.vec);
    int w = 1;
    while (w < 32 && w < row_vectors) w *= 2;
    p.tile_vectors = w;
    p.tiles = ceil_div(row_vectors, w);
    p.chunk = chunk_units(int64_t(kBatchNormThreads / w) * unroll, int64_t(w) * p.vec * elem_size);
  }
  p.chunks = ceil_div(per_channel, p.chunk);
  const int64_t resident = int64_t(std::max(sm_count, 1)) * kBatchNormStatsCtasPerSm;
  p.stats_ctas = std::clamp<int64_t>(resident / p.tiles, 1, std::max<int64_t>(p.chunks, 1));
  // Every grid the launcher casts to unsigned: apply, statistics and finalize (a warp a channel).
  if (p.ctas() > std::numeric_limits<int>::max() || p.stats_grid() > std::numeric_limits<int>::max() ||
      ceil_div(p.c, kBatchNormThreads / 32) > std::numeric_limits<int>::max())
    return Status::unsupported("x: " + std::to_string(p.c) + " channels of " + std::to_string(per_channel) +
                               " values need more CTAs than one launch takes");

  // The places (elements or rows) a statistics thread's jump passes; none where each statistics
  // CTA has one chunk (then jump < n * s, so no offset below can pass x's elements).
  const int64_t jump = p.stats_ctas < p.chunks ? p.stats_ctas * p.chunk : 0;
  if (p.layout == BatchNormLayout::kChannelsFirst) {
    if (p.s > 0) {
      const int64_t step = int64_t(kBatchNormThreads) * p.vec, run_stride = p.c * p.s;
      p.step_in_run = step % p.s;
      p.step_offset = step / p.s * run_stride + p.step_in_run;
      p.wrap_offset = run_stride - p.s;
      p.jump_in_run = jump % p.s;
      p.jump_offset = jump / p.s * run_stride + p.jump_in_run;
    }
  } else {
    p.step_offset = int64_t(kBatchNormThreads / p.tile_vectors) * p.c;
    p.jump_offset = jump * p.c;
  }

  const auto align16 = [](std::size_t b) { return (b + 15) / 16 * 16; };
  p.params_offset = align16(static_cast<std::size_t>(p.c * p.stats_ctas * 2) * acc_size);
  p.workspace_bytes = p.params_offset + align16(static_cast<std::size_t>(p.c * 4) * acc_size);
  *plan = p;
  return Status::ok();
}

bool plan_batch_norm_columns(const BatchNormPlan& plan, int elem_size, int acc_size, bool base_aligned16,
                             int sm_count, int64_t below_bytes, BatchNormPlan* columns) {
  if (plan.layout != BatchNormLayout::kChannelsFirst || plan.s <= 1 || plan.n * plan.c * plan.s == 0 ||
      plan.s * elem_size >= below_bytes || !base_aligned16)
    return false;
  const int64_t cols = plan.c * plan.s;  // n * c * s fits int64 (plan_batch_norm)
  if (cols % (16 / elem_size) != 0) return false;
  const int64_t sizes[2] = {plan.n, cols}, strides[2] = {cols, 1};
  BatchNormPlan p;
  if (!plan_batch_norm(2, sizes, strides, elem_size, acc_size, true, sm_count, &p).is_ok()) return false;
  if (p.layout != BatchNormLayout::kChannelsLast || p.vec != 16 / elem_size) return false;
  *columns = p;
  return true;
}

BatchNormResidentPlan plan_batch_norm_resident(const BatchNormPlan& plan, int elem_size, int inputs,
                                               bool alignment_shared) {
  BatchNormResidentPlan r;
  if (plan.layout != BatchNormLayout::kChannelsFirst || !alignment_shared || plan.channel_count() < 2) return r;
  const int64_t channel_bytes = plan.channel_count() * elem_size * inputs;
  for (const std::size_t tier : kBatchNormResidentTiers) {
    // Too large for the biggest cluster whatever the cut (each slot costs at least its bytes).
    if (channel_bytes > int64_t(tier) * kBatchNormResidentClusterLimit) continue;
    for (int k = 1; k <= kBatchNormResidentClusterLimit; ++k) {
      // Pieces shorter than a few granules cost more in slot slack than they save; past 4 pieces
      // a CTA, finer cuts no longer even out the CTAs' shares.
      const int64_t max_parts = std::clamp<int64_t>(plan.s * elem_size / 64, 1, 4 * kBatchNormResidentClusterLimit);
      for (int64_t parts = 1; parts <= max_parts; ++parts) {
        const int64_t piece = ceil_div(plan.s, parts);
        const int64_t real_parts = ceil_div(plan.s, piece);  // no empty pieces
        // Runs that start on granule boundaries are cut on granule boundaries: whole-granule copies.
        if (real_parts > 1 && plan.s * elem_size % 16 == 0 && piece * elem_size % 16 != 0) continue;
        const int64_t pieces = plan.n * real_parts;
        const int64_t per_cta = ceil_div(pieces, k);
        if ((k - 1) * per_cta >= pieces) continue;  // a CTA would hold nothing (fewer pieces than CTAs too)
        const int64_t slot_granules = ceil_div(piece * elem_size, 16) + 1;
        const int64_t bytes = per_cta * slot_granules * 16 * inputs;
        if (bytes > int64_t(tier)) continue;
        if (plan.c * k > std::numeric_limits<int>::max()) return r;  // more CTAs than one launch takes
        r.cluster = k;
        r.pieces = pieces;
        r.parts = real_parts;
        r.piece = piece;
        r.pieces_per_cta = per_cta;
        r.slot_granules = slot_granules;
        r.smem_bytes = static_cast<std::size_t>(bytes);
        r.group = 1;
        while (r.group < 32 && r.group < slot_granules) r.group *= 2;
        return r;
      }
    }
  }
  return r;
}

Status plan_sync_batch_norm_workspace(std::size_t local_bytes, int ranks, int64_t channels,
                                      SyncBatchNormWorkspace* plan) {
  if (ranks < 1) return Status::invalid_argument("comm: expected at least one rank, got " + std::to_string(ranks));
  if (channels < 0) return Status::invalid_argument("x: negative channel count " + std::to_string(channels));
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max() / 2;
  const std::size_t row = kSyncBatchNormPacketWidth * sizeof(double);
  if (local_bytes > kMax || static_cast<std::size_t>(channels) > kMax / row / static_cast<std::size_t>(ranks))
    return Status::unsupported("x: the SyncBatchNorm workspace of " + std::to_string(ranks) + " ranks and " +
                               std::to_string(channels) + " channels does not fit a size_t");
  SyncBatchNormWorkspace p;
  p.packets_offset = (local_bytes + 15) / 16 * 16;
  p.packet_bytes = static_cast<std::size_t>(channels) * row;
  p.bytes = p.packets_offset + p.packet_bytes * static_cast<std::size_t>(ranks);
  *plan = p;
  return Status::ok();
}

}  // namespace reducekit
