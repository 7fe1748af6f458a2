// SPDX-License-Identifier: Apache-2.0
#include "reducekit/tuning.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

namespace reducekit {
namespace {

// The settings a sweep may override, as the planners read them.
constexpr const char* kNames[] = {
    // row engine (RowKernelLimits)
    "max_cluster", "max_block_threads", "block_elems", "min_block_threads", "ring", "two_phase", "max_tile_values",
    "split_chunk_tiles", "split_ring", "split_min_cluster", "split_max_elem_bytes", "split_reread_from_bytes",
    "split_reread_min_chunk_tiles", "reread_above_words",
    "reread_ragged_lengths_only", "reread_small_tiles_from_bytes", "reread_stash_bytes", "l2_hints_from_bytes",
    "wide_rows", "wide_above_threads", "wide_max_threads", "wide_whole_above_threads", "wide_partial_max_threads", "wide_lean_max_threads",
    "wide_roomy_max_threads", "wide_whole_roomy_max_threads",
    "wide_mid_max_threads", "wide_fill_above_threads",
    "read_back_second", "loads_ahead",
    // staged rows, band b of RowKernelLimits::staged (b = 0 .. 3)
    "staged0_min_bytes", "staged0_max_bytes", "staged0_threads", "staged0_share_bytes", "staged0_ragged_only",
    "staged1_min_bytes", "staged1_max_bytes", "staged1_threads", "staged1_share_bytes", "staged1_ragged_only",
    "staged2_min_bytes", "staged2_max_bytes", "staged2_threads", "staged2_share_bytes", "staged2_ragged_only",
    "staged3_min_bytes", "staged3_max_bytes", "staged3_threads", "staged3_share_bytes", "staged3_ragged_only",
    // fused norm backward
    "norm_bwd_max_vpt", "norm_bwd_ctas_per_sm",
    // cross-entropy row kernels: float32 logits of at least this many bytes launch by shift class;
    // batches of fewer rows split each row over a cluster; 0: the class-probability forward's
    // 16-bit rows off their granules on the prefetching kernel too
    "cross_entropy_classes_from_bytes", "cross_entropy_split_below_rows", "cross_entropy_probs_shared_granules",
    // batch_norm: channels-first planes of fewer bytes read as the columns of [N, C * S]
    "batch_norm_column_plane_bytes",
    // softmax over a non-innermost dim (SoftmaxColumnPlan::buffers; SoftmaxColumnOverrides)
    "column_stage_buffers", "column_min_vectors", "column_stage_target_bytes", "column_stage_max_bytes",
    "column_max_split", "column_wide_vectors",
    // reduce engine (ReduceKnobs): the row path, the column path
    "row_warp_max_vectors",
    "col_min_segment_rows", "col_max_segments", "col_split_below_vectors", "col_groups_below_ctas",
    "col_wide_from_columns"};

std::mutex mutex;
std::map<std::string, int64_t> overrides;
std::atomic<bool> any_set{false};  // lets every launch skip the lock when nothing is overridden

}  // namespace

Status set_tuning(const std::string& name, std::optional<int64_t> value) {
  if (std::none_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; }))
    return Status::invalid_argument("name: '" + name + "' is not a tuning setting (" + tuning_names() + ")");
  const std::lock_guard<std::mutex> lock(mutex);
  if (value) overrides[name] = *value;
  else overrides.erase(name);
  any_set = !overrides.empty();
  return Status::ok();
}

void clear_tuning() {
  const std::lock_guard<std::mutex> lock(mutex);
  overrides.clear();
  any_set = false;
}

std::optional<int64_t> tuning(const char* name) {
  if (!any_set) return std::nullopt;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = overrides.find(name);
  if (it == overrides.end()) return std::nullopt;
  return it->second;
}

std::string tuning_names() {
  std::string names;
  for (const char* n : kNames) names += (names.empty() ? "" : ", ") + std::string(n);
  return names;
}

}  // namespace reducekit
