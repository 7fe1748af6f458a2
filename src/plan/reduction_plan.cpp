// SPDX-License-Identifier: Apache-2.0
// Host planning: strided tensor + named dims -> one canonical problem (see reduction_plan.hpp).
#include "plan/reduction_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "plan/checked_mul.hpp"

namespace reducekit {
namespace {

// A run of dims that addresses like one dim: `size` elements `stride` apart.
struct Group {
  int64_t size;
  int64_t stride;
};

// True when `outer` followed by `inner` is one dim of size outer.size * inner.size and stride
// inner.stride, i.e. stepping outer once is the same as stepping inner inner.size times.
bool can_merge(const Group& outer, const Group& inner) {
  int64_t span = 0;
  if (!checked_mul(inner.stride, inner.size, &span)) return false;
  return outer.stride == span;
}

// Appends `g` to `groups`, merging it into the last group when the layout allows.
void push_group(Group* groups, int* count, const Group& g) {
  if (*count > 0 && can_merge(groups[*count - 1], g)) {
    groups[*count - 1] = Group{groups[*count - 1].size * g.size, g.stride};
  } else {
    groups[(*count)++] = g;
  }
}

Status validate_view(const TensorView& x) {
  if (x.rank < 0 || x.rank > kMaxRank) {
    return Status::invalid_argument("x: rank " + std::to_string(x.rank) +
                                    " is not supported (at most " + std::to_string(kMaxRank) + ")");
  }
  // The product of the non-zero sizes must fit, so that every partial product below fits too.
  int64_t nonzero_numel = 1;
  for (int d = 0; d < x.rank; ++d) {
    if (x.sizes[d] < 0) {
      return Status::invalid_argument("x: size " + std::to_string(x.sizes[d]) + " of dim " +
                                      std::to_string(d) + " is negative");
    }
    // Strides of size-1 dims are never used to address anything, so any value is accepted there.
    if (x.sizes[d] > 1 && x.strides[d] < 0) {
      return Status::unsupported("x: stride " + std::to_string(x.strides[d]) + " of dim " +
                                 std::to_string(d) + " is negative");
    }
    if (x.sizes[d] != 0 && !checked_mul(nonzero_numel, x.sizes[d], &nonzero_numel)) {
      return Status::invalid_argument("x: the number of elements overflows int64");
    }
  }
  return Status::ok();
}

// torch's dim wrapping; a rank-0 tensor accepts 0 and -1 as if it had one dim.
Status wrap_dim(int64_t dim, int rank, int* wrapped) {
  const int64_t n = rank > 0 ? rank : 1;
  if (dim < -n || dim >= n) {
    return Status::invalid_argument("dim: " + std::to_string(dim) +
                                    " is out of range for a tensor of rank " +
                                    std::to_string(rank));
  }
  *wrapped = static_cast<int>(dim < 0 ? dim + n : dim);
  return Status::ok();
}

// Describes the problem on a dense [out_numel, reduced] layout: the contiguous permuted copy,
// or an empty tensor, where no element is read and dense strides are the safe choice.
void set_dense_problem(int64_t out_numel, int64_t reduced, ReductionPlan* p) {
  p->kind = out_numel == 1 ? ReductionKind::kAll : ReductionKind::kRow;
  p->outer = out_numel;
  p->reduced = reduced;
  p->inner = 1;
  p->outer_stride = reduced;
  p->reduced_stride = 1;
  p->inner_stride = 1;
}

}  // namespace

int shift_period(int64_t row_stride, int elem_bytes) {
  // The misalignment's change from a row to the next, in bytes mod 16 (a one-row view may carry
  // any stride: reduced first, so nothing overflows).
  const int step = static_cast<int>(row_stride % 16) * elem_bytes % 16;
  int p = 1;
  while (p * step % 16 != 0) p *= 2;  // p = 16 always is
  return p;
}

Status plan_rowwise(const TensorView& x, int64_t dim, RowwisePlan* plan) {
  if (plan == nullptr) return Status::invalid_argument("plan: is null");
  REDUCEKIT_RETURN_IF_ERROR(validate_view(x));
  int d = 0;
  REDUCEKIT_RETURN_IF_ERROR(wrap_dim(dim, x.rank, &d));

  RowwisePlan p;
  if (x.rank == 0) {  // one element: one row of one column
    p.rows = 1;
    p.cols = 1;
    p.row_stride = 1;
    p.row_major = true;
    *plan = p;
    return Status::ok();
  }

  p.cols = x.sizes[d];
  p.rows = 1;
  for (int i = 0; i < x.rank; ++i) {
    if (i != d) p.rows *= x.sizes[i];
  }
  // Nothing is read or written, so any layout will do; dense strides keep offsets meaningful.
  if (p.rows == 0 || p.cols == 0) {
    p.row_stride = p.cols;
    p.row_major = true;
    *plan = p;
    return Status::ok();
  }

  bool row_major = p.cols <= 1 || x.strides[d] == 1;
  // The other dims, innermost first, must chain into one row index; size-1 dims add no step.
  Group rows_group{1, p.cols};  // a single row: the stride is never used, dense is the natural one
  bool first = true;
  for (int i = x.rank - 1; i >= 0 && row_major; --i) {
    if (i == d || x.sizes[i] == 1) continue;
    const Group g{x.sizes[i], x.strides[i]};
    if (first) {
      rows_group = g;
      first = false;
    } else if (can_merge(g, rows_group)) {
      rows_group = Group{g.size * rows_group.size, rows_group.stride};
    } else {
      row_major = false;
    }
  }
  p.row_major = row_major;
  // row_stride may be 0 (an expanded input) or below cols (overlapping rows): fine to read; the
  // op layer checks that outputs do not overlap.
  p.row_stride = row_major ? rows_group.stride : p.cols;
  *plan = p;
  return Status::ok();
}

namespace {

bool reduces_every_dim(const TensorView& x, const ReductionPlan& p) {
  for (int d = 0; d < x.rank; ++d)
    if (!p.reduced_mask[d]) return false;
  return true;
}

// Whether the plan walks the reduced set row-major in the order of x's dims. A plan that merged
// several reduced dims in another order (e.g. all dims of a transposed tensor) walks memory order.
bool reduced_dims_in_memory_order(const TensorView& x, const ReductionPlan& p) {
  int64_t previous_stride = -1;
  for (int d = 0; d < x.rank; ++d) {
    if (!p.reduced_mask[d] || x.sizes[d] <= 1) continue;
    if (previous_stride >= 0 && x.strides[d] >= previous_stride) return false;
    previous_stride = x.strides[d];
  }
  return true;
}

// The canonical problem x's layout collapses into as it lies in memory, else a copy.
Status plan_layout(const TensorView& x, const ReduceDims& dims, bool keepdim, ReductionPlan* plan) {
  ReductionPlan p;
  p.base_aligned = reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  if (dims.all) {
    for (int d = 0; d < x.rank; ++d) p.reduced_mask[d] = true;
  } else {
    if (dims.count < 0 || dims.count > kMaxRank) {
      return Status::invalid_argument("dim: " + std::to_string(dims.count) +
                                      " dims given, at most " + std::to_string(kMaxRank) +
                                      " are supported");
    }
    bool seen[kMaxRank] = {};
    for (int i = 0; i < dims.count; ++i) {
      int d = 0;
      REDUCEKIT_RETURN_IF_ERROR(wrap_dim(dims.dims[i], x.rank, &d));
      if (seen[d]) return Status::invalid_argument("dim: " + std::to_string(d) + " appears twice");
      seen[d] = true;
      // A rank-0 tensor has no dim to mark; reducing its "dim 0" is reducing its one element.
      if (x.rank > 0) p.reduced_mask[d] = true;
    }
  }

  // Output shape and the copy order (kept dims first, so the copy's rows are the outputs).
  int64_t out_numel = 1;
  int64_t reduced_numel = 1;
  int num_perm = 0;
  for (int d = 0; d < x.rank; ++d) {
    if (p.reduced_mask[d]) {
      reduced_numel *= x.sizes[d];
      if (keepdim) p.out_sizes[p.out_rank++] = 1;
    } else {
      out_numel *= x.sizes[d];
      p.out_sizes[p.out_rank++] = x.sizes[d];
      p.permutation[num_perm++] = d;
    }
  }
  for (int d = 0; d < x.rank; ++d) {
    if (p.reduced_mask[d]) p.permutation[num_perm++] = d;
  }
  p.out_numel = out_numel;

  // No element is read: no copy, whatever the strides say.
  if (out_numel == 0 || reduced_numel == 0) {
    set_dense_problem(out_numel, reduced_numel, &p);
    *plan = p;
    return Status::ok();
  }

  // Kept dims merge only in their own order, because outputs are written in that order (adjacent
  // in the kept list is enough: a reduced dim between them in x does not matter).
  Group kept[kMaxRank];
  int num_kept = 0;
  for (int d = 0; d < x.rank; ++d) {
    if (!p.reduced_mask[d] && x.sizes[d] > 1) {
      push_group(kept, &num_kept, {x.sizes[d], x.strides[d]});
    }
  }
  // Reduced dims may merge in any order. A chain of merges has strictly decreasing strides
  // (stride-0 dims last), so sorting by stride finds a full merge whenever one exists.
  Group by_stride[kMaxRank];
  int num_by_stride = 0;
  for (int d = 0; d < x.rank; ++d) {
    if (p.reduced_mask[d] && x.sizes[d] > 1) {
      by_stride[num_by_stride++] = {x.sizes[d], x.strides[d]};
    }
  }
  std::stable_sort(by_stride, by_stride + num_by_stride,
                   [](const Group& a, const Group& b) { return a.stride > b.stride; });
  Group red[kMaxRank];
  int num_red = 0;
  for (int i = 0; i < num_by_stride; ++i) push_group(red, &num_red, by_stride[i]);

  // With nothing left to reduce (only size-1 dims named) the reduction is one element per output;
  // that extent fits any stride, so it takes whichever form the kept dims allow.
  const bool reduces_nothing = num_red == 0;
  const Group r = reduces_nothing ? Group{1, 1} : red[0];
  bool canonical = num_red <= 1;
  if (canonical && num_kept == 0) {
    // One output: kAll when the reduced elements are one dense run from the base pointer.
    canonical = r.stride == 1 || reduces_nothing;
    if (canonical) set_dense_problem(1, r.size, &p);
  } else if (canonical && num_kept == 1 && (r.stride == 1 || reduces_nothing)) {
    p.kind = ReductionKind::kRow;
    p.outer = kept[0].size;
    p.outer_stride = kept[0].stride;
    p.reduced = r.size;
    p.reduced_stride = 1;
    p.inner = 1;
    p.inner_stride = 1;
  } else if (canonical && num_kept <= 2 && kept[num_kept - 1].stride == 1) {
    // The last kept run is contiguous, so it becomes the coalesced inner extent; anything before
    // it is the outer extent.
    const Group& in = kept[num_kept - 1];
    p.kind = ReductionKind::kColumn;
    p.inner = in.size;
    p.inner_stride = 1;
    p.reduced = r.size;
    p.reduced_stride = reduces_nothing ? in.size : r.stride;
    p.outer = num_kept == 2 ? kept[0].size : 1;
    p.outer_stride = num_kept == 2 ? kept[0].stride : r.size * in.size;
  } else {
    canonical = false;
  }

  if (!canonical) {
    // The op layer makes a contiguous copy of x permuted by p.permutation; this plan is for it.
    p.needs_copy = true;
    set_dense_problem(out_numel, reduced_numel, &p);
  }
  *plan = p;
  return Status::ok();
}

}  // namespace

Status plan_reduction(const TensorView& x, const ReduceDims& dims, bool keepdim, ReductionPlan* plan,
                      bool reduced_in_dim_order) {
  if (plan == nullptr) return Status::invalid_argument("plan: is null");
  REDUCEKIT_RETURN_IF_ERROR(validate_view(x));
  ReductionPlan p;
  REDUCEKIT_RETURN_IF_ERROR(plan_layout(x, dims, keepdim, &p));
  if (reduced_in_dim_order && !p.needs_copy && !reduced_dims_in_memory_order(x, p)) {
    p.needs_copy = true;
    set_dense_problem(p.out_numel, p.reduced, &p);
  }
  // One output of a reduction that keeps some dim (of size 1) is a row, so it gets the row
  // path's arithmetic: x[i:i+1].sum(-1) equals x.sum(-1)[i] bit for bit.
  if (p.kind == ReductionKind::kAll && !reduces_every_dim(x, p)) {
    p.kind = ReductionKind::kRow;
    p.outer = 1;
    p.outer_stride = p.reduced;
  }
  // Likewise one strided column (x[:, j:j+1] reduced over dim 0) is the column problem with an
  // inner extent of 1 rather than a copy: it matches x.sum(0)[j] bit for bit.
  int only_long_dim = -1, long_dims = 0;
  for (int d = 0; d < x.rank; ++d)
    if (x.sizes[d] > 1) ++long_dims, only_long_dim = d;
  if (p.needs_copy && long_dims == 1 && p.reduced_mask[only_long_dim] && !reduces_every_dim(x, p)) {
    p.needs_copy = false;
    p.kind = ReductionKind::kColumn;
    p.outer = 1;
    p.inner = 1;
    p.reduced_stride = x.strides[only_long_dim];
    p.outer_stride = p.reduced * p.reduced_stride;
  }
  *plan = p;
  return Status::ok();
}

}  // namespace reducekit
