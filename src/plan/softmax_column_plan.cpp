// SPDX-License-Identifier: Apache-2.0
// Host planning of the softmax family over a non-innermost dim (see softmax_column_plan.hpp).
#include "plan/softmax_column_plan.hpp"

#include <string>

#include "plan/checked_mul.hpp"

namespace reducekit {

bool dense_column_extents(const TensorView& x, int dim, ColumnExtents* extents) {
  if (dim < 0 || dim >= x.rank) return false;
  ColumnExtents e;
  int64_t expected_stride = 1;
  for (int d = x.rank - 1; d >= 0; --d) {
    if (x.sizes[d] == 0) return false;
    if (x.sizes[d] != 1 && x.strides[d] != expected_stride) return false;
    expected_stride *= x.sizes[d];
    if (d > dim) e.inner *= x.sizes[d];
    else if (d < dim) e.outer *= x.sizes[d];
    else e.reduced = x.sizes[d];
  }
  if (e.inner <= 1) return false;
  *extents = e;
  return true;
}

Status plan_softmax_columns(const ColumnExtents& ext, int elem_bytes, int inputs, int stat_bytes, int param_bytes,
                            std::size_t max_smem_per_cta, SoftmaxColumnPlan* plan,
                            const SoftmaxColumnOverrides& overrides) {
  const int min_vectors = overrides.min_vectors, max_split = overrides.max_split;
  const int wide_vectors = overrides.wide_vectors != 0 ? overrides.wide_vectors : kColumnWideVectors;
  const std::size_t target = overrides.target_bytes, stage_max_bytes = overrides.stage_max_bytes;
  if (plan == nullptr) return Status::invalid_argument("plan: is null");
  if (ext.outer < 1 || ext.reduced < 1 || ext.inner < 2)
    return Status::invalid_argument("x: column extents [" + std::to_string(ext.outer) + ", " +
                                    std::to_string(ext.reduced) + ", " + std::to_string(ext.inner) +
                                    "] need outer >= 1, K >= 1 and inner >= 2");
  // A dense tensor's element count fits int64 (plan_rowwise checks it), so the CTA count below does.
  int64_t elements = 0;
  if (!checked_mul(ext.outer, ext.reduced, &elements) || !checked_mul(elements, ext.inner, &elements))
    return Status::invalid_argument("x: column extents [" + std::to_string(ext.outer) + ", " +
                                    std::to_string(ext.reduced) + ", " + std::to_string(ext.inner) +
                                    "] hold more elements than int64 counts");
  if (elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8)
    return Status::invalid_argument("elem_bytes: " + std::to_string(elem_bytes) + " is not 2, 4 or 8");
  if (inputs != 1 && inputs != 2) return Status::invalid_argument("inputs: " + std::to_string(inputs) + " is not 1 or 2");
  if (stat_bytes <= 0) return Status::invalid_argument("stat_bytes: " + std::to_string(stat_bytes) + " is not positive");
  if (param_bytes <= 0) return Status::invalid_argument("param_bytes: " + std::to_string(param_bytes) + " is not positive");
  const auto power_of_two_up_to = [](const char* name, int value, int most) {
    if (value >= 1 && value <= most && (value & (value - 1)) == 0) return Status::ok();
    return Status::invalid_argument(std::string(name) + ": " + std::to_string(value) +
                                    " is not a power of two from 1 to " + std::to_string(most));
  };
  REDUCEKIT_RETURN_IF_ERROR(power_of_two_up_to("min_vectors", min_vectors, kColumnSoftmaxThreads));
  if (target < 1024 || target > kColumnStageMaxBytes)
    return Status::invalid_argument("target_bytes: " + std::to_string(target) + " is not from 1024 to " +
                                    std::to_string(kColumnStageMaxBytes));
  REDUCEKIT_RETURN_IF_ERROR(power_of_two_up_to("wide_vectors", wide_vectors, kColumnSoftmaxThreads));
  REDUCEKIT_RETURN_IF_ERROR(power_of_two_up_to("max_split", max_split, kColumnMaxSplit));

  SoftmaxColumnPlan p;
  p.ext = ext;
  p.vec = 16 / elem_bytes;
  // Bytes of a band of `rows` rows (all inputs) `vectors` wide; K is capped so products stay in int64.
  const int64_t k = ext.reduced < (int64_t(1) << 40) ? ext.reduced : (int64_t(1) << 40);
  const auto tile_of = [&](int vectors, int64_t rows) {
    return static_cast<std::size_t>(rows * vectors * 16 * inputs);
  };
  // Rows of K a CTA of a `split`-CTA tile stages, 0 where the last CTA would have none.
  const auto band_of = [&](int split) {
    const int64_t band = (k - 1) / split + 1;
    return (split - 1) * band >= k ? 0 : band;
  };
  const auto widest_within_target = [&](int64_t rows) {
    for (int w = kColumnSoftmaxThreads; w >= min_vectors; w /= 2)
      if (tile_of(w, rows) <= target) return w;
    return 0;
  };

  p.col_vectors = widest_within_target(k);
  const bool split_tile = p.col_vectors == 0 && tile_of(min_vectors, k) > kColumnSplitFromBytes;
  for (int split = 2; split_tile && split <= max_split && p.col_vectors == 0 && band_of(split) != 0; split *= 2) {
    p.split = split;
    p.col_vectors = widest_within_target(band_of(split));
  }
  const std::size_t stage_max = stage_max_bytes != 0 ? stage_max_bytes
                                : inputs == 1        ? kColumnStageMaxBytes
                                                     : kColumnStageMaxBytesTwoInputs;
  if (p.col_vectors == 0) {
    p.split = 1;
    if (tile_of(min_vectors, k) <= stage_max) p.col_vectors = min_vectors;
  }
  for (int split = 1; p.col_vectors != 0 && p.col_vectors < wide_vectors && split <= max_split && band_of(split) != 0;
       split *= 2) {
    if (tile_of(wide_vectors, band_of(split)) <= kColumnSplitFromBytes) {
      p.col_vectors = wide_vectors;
      p.split = split;
    }
  }
  p.band = (ext.reduced - 1) / p.split + 1;
  p.staged = p.col_vectors != 0;
  if (!p.staged) p.col_vectors = kColumnStreamVectors;

  // Beside the tiles: the lanes' statistics [thread][V], the parameters [W][V] and a split tile's
  // merged statistics [W][V].
  const auto fixed_bytes = [&] {
    return static_cast<std::size_t>(kColumnSoftmaxThreads) * p.vec * stat_bytes +
           static_cast<std::size_t>(p.col_vectors) * p.vec * (param_bytes + (p.split > 1 ? stat_bytes : 0));
  };
  if (p.staged && tile_of(p.col_vectors, p.band) + fixed_bytes() > max_smem_per_cta) {
    p.staged = false;  // a device with less shared memory than the table assumes
    p.col_vectors = kColumnStreamVectors;
  }
  if (!p.staged) {
    p.split = 1;
    p.band = ext.reduced;
  }
  p.k_lanes = kColumnSoftmaxThreads / p.col_vectors;
  p.tile_bytes = p.staged ? tile_of(p.col_vectors, p.band) : 0;
  const std::size_t fixed = fixed_bytes();
  p.buffers = p.staged && 2 * p.tile_bytes + fixed <= max_smem_per_cta ? 2 : 1;
  p.smem_bytes = p.buffers * p.tile_bytes + fixed;
  p.width = static_cast<int64_t>(p.col_vectors) * p.vec;
  p.tiles_per_slab = (ext.inner - 1) / p.width + 1;  // inner + width - 1 may pass int64 (outer = K = 1)
  p.tiles = ext.outer * p.tiles_per_slab;
  *plan = p;
  return Status::ok();
}

}  // namespace reducekit
