// SPDX-License-Identifier: Apache-2.0
// Host planning: turns a strided tensor plus the dims the user names into one canonical problem.
// Plain C++17, no CUDA, so it is unit-tested everywhere; kernels only ever see the result.
//
// The three canonical problems (x is read at the offsets shown; every index is int64):
//
//   kRow     [M, N], reduce N            x[m * outer_stride + j]                        j < N
//            N has stride 1 (reduced_stride == 1), so a row is one contiguous run.
//            out[m]
//
//            m -> +--------------------+  <- start of row m is m * outer_stride
//                 | j = 0 1 2 ... N-1  |     (outer_stride >= N when rows are slices of wider rows)
//                 +--------------------+
//
//   kColumn  [M, K, N], reduce K        x[m * outer_stride + k * reduced_stride + n]   n < N
//            N has stride 1 (inner_stride == 1), so a warp's loads coalesce along n
//            while each thread walks k; N is 1 only for one strided column (x[:, j:j+1]).
//            out[m * N + n]
//
//                  n ->  0 1 2 ... N-1
//            k = 0      [ . . . ... . ]  <- +reduced_stride per k
//            k = 1      [ . . . ... . ]
//            ...         (one such slab per m, +outer_stride per m)
//
//   kAll     one segment of everything: x[i], i < numel, dense (stride 1). out[0]
//            Only where every dim is reduced: one output of a reduction keeping a dim is kRow.
//
// The output is always written densely in the order of x's kept dims (row-major), which is why
// kept dims never change their relative order in a plan, while reduced dims may be merged in
// whatever order their strides allow.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"

namespace reducekit {

// ---------------------------------------------------------------------------------------------
// Row-wise ops (softmax, norms): one op per row over a single dim.
// ---------------------------------------------------------------------------------------------

// A per-row op over one dim of x: rows x cols, row r starting at r * row_stride.
struct RowwisePlan {
  int64_t rows = 0;        // product of all sizes except sizes[dim]
  int64_t cols = 0;        // sizes[dim]
  int64_t row_stride = 0;  // elements between the starts of consecutive rows
  // True when dim's elements have stride 1 (or cols <= 1) and all other dims merge into one row
  // index with stride row_stride. When false, row_stride is cols (the row stride of a dense copy
  // with dim moved last) and the op layer falls back, e.g. asks for a contiguous copy.
  // Empty tensors (rows or cols 0) read nothing, so they are row_major with row_stride = cols.
  bool row_major = false;
};

// Normalizes a negative dim (torch's wrapping; rank-0 tensors accept dim 0 or -1 and plan as one
// row of one element). Errors are kInvalidArgument naming the argument, e.g.
// "dim: 3 is out of range for a tensor of rank 2". A layout that is not row-major is not an
// error: it is reported through plan->row_major.
Status plan_rowwise(const TensorView& x, int64_t dim, RowwisePlan* plan);

// The fewest rows p (1, 2, 4, 8 or 16) such that rows r and r + p of a row-major layout start at the
// same offset within a 16-byte granule: p * row_stride * elem_bytes is a multiple of 16.
int shift_period(int64_t row_stride, int elem_bytes);

// ---------------------------------------------------------------------------------------------
// Reductions over any set of dims.
// ---------------------------------------------------------------------------------------------

// Which dims a reduction combines. `all` is torch's dim=None. With all == false the listed dims
// are reduced (negative values wrap); an empty list reduces nothing, so the binding decides how
// to map torch's legacy "dim=[] means all" onto `all`.
struct ReduceDims {
  bool all = false;
  int count = 0;                     // number of entries of dims in use (at most kMaxRank)
  int64_t dims[kMaxRank] = {};

  static ReduceDims all_dims() {
    ReduceDims r;
    r.all = true;
    return r;
  }
  // More than kMaxRank dims cannot be stored; count keeps the true length so that
  // plan_reduction reports the error instead of silently dropping dims.
  static ReduceDims of(std::initializer_list<int64_t> list) {
    ReduceDims r;
    r.count = static_cast<int>(list.size());
    int i = 0;
    for (int64_t d : list) {
      if (i == kMaxRank) break;
      r.dims[i++] = d;
    }
    return r;
  }
};

enum class ReductionKind : int8_t { kRow, kColumn, kAll };

inline constexpr const char* reduction_kind_name(ReductionKind k) {
  switch (k) {
    case ReductionKind::kRow: return "row";
    case ReductionKind::kColumn: return "column";
    case ReductionKind::kAll: return "all";
  }
  return "unknown";
}

struct ReductionPlan {
  ReductionKind kind = ReductionKind::kAll;

  // Extents, see the diagram above. `reduced` is always the number of elements combined into one
  // output (N for kRow, K for kColumn, numel for kAll); it is 0 for an empty reduction.
  int64_t outer = 1;    // M (1 for kAll); 0 when there are no outputs
  int64_t reduced = 1;  // N for kRow, K for kColumn, every element for kAll
  int64_t inner = 1;    // N for kColumn (> 1 but for one strided column); 1 for kRow and kAll

  // Element strides. Contract: kRow and kAll have reduced_stride == 1 and inner_stride == 1;
  // kColumn has inner_stride == 1. An extent of 1 that has no stride of its own gets the stride
  // a dense [outer, reduced, inner] layout would give it, so the offsets stay in bounds.
  int64_t outer_stride = 0;
  int64_t reduced_stride = 1;
  int64_t inner_stride = 1;
  // x's first element lies on a 16-byte boundary; with the strides above it says which runs may
  // load as whole vectors (plan_reduce_kernel).
  bool base_aligned = true;

  // The output: x's shape without the reduced dims (keepdim: with them as size 1), written densely.
  int out_rank = 0;
  int64_t out_sizes[kMaxRank] = {};
  int64_t out_numel = 1;
  bool reduced_mask[kMaxRank] = {};  // reduced_mask[d]: dim d of x is reduced

  // True when x's layout does not collapse into a canonical problem as it lies in memory (e.g.
  // dims {0, 2} of a contiguous [A, B, C], or a last dim sliced with a step). The op layer then
  // makes a contiguous copy of x permuted by `permutation` (x's kept dims in their order, then its
  // reduced dims in their order) and runs this plan on the copy: all extents and strides above
  // then describe that copy, a kRow problem [out_numel, reduced] (kAll when out_numel == 1 and
  // every dim is reduced).
  // `permutation` is filled for every plan; it only has to be applied when needs_copy is set.
  bool needs_copy = false;
  int permutation[kMaxRank] = {};
};

// Plans a reduction of x over `dims`. Negative dims wrap; a dim out of range or given twice is
// kInvalidArgument naming "dim" (e.g. "dim: 1 appears twice"). Size-1 dims never block merging;
// zero-size dims plan fine (outer 0: no outputs; reduced 0: empty reduction, the op decides what
// that means). Negative strides are kUnsupported.
// One output of a reduction that keeps some dim is a kRow (not kAll) problem, and one strided
// column a kColumn problem of inner extent 1 (not a copy), so a sliced input gets the bits of
// the same rows or columns in the whole tensor. reduced_in_dim_order: the op counts the reduced
// set row-major in x's dim order (argmax / argmin), so a layout that would walk it in another
// order is planned as a copy.
Status plan_reduction(const TensorView& x, const ReduceDims& dims, bool keepdim, ReductionPlan* plan,
                      bool reduced_in_dim_order = false);

}  // namespace reducekit
