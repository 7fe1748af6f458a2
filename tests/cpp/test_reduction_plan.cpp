// SPDX-License-Identifier: Apache-2.0
// Host tests for plan_rowwise and plan_reduction: exact fields on hand-picked layouts, error
// messages, and a brute-force check that every plan reads exactly the right elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "plan/reduction_plan.hpp"

namespace reducekit {
namespace {

TensorView make_view(std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
  TensorView v;
  v.rank = static_cast<int>(sizes.size());
  int d = 0;
  for (int64_t s : sizes) v.sizes[d++] = s;
  d = 0;
  for (int64_t s : strides) v.strides[d++] = s;
  return v;
}

TensorView dense(std::initializer_list<int64_t> sizes) {
  return make_contiguous_view(nullptr, DType::kFloat32, sizes, kHostDevice);
}

std::vector<int64_t> out_shape(const ReductionPlan& p) {
  return std::vector<int64_t>(p.out_sizes, p.out_sizes + p.out_rank);
}

std::vector<int> permutation(const ReductionPlan& p, int rank) {
  return std::vector<int>(p.permutation, p.permutation + rank);
}

std::vector<bool> mask(const ReductionPlan& p, int rank) {
  return std::vector<bool>(p.reduced_mask, p.reduced_mask + rank);
}

// Every extent and stride in one call, so a test states the whole problem.
void expect_problem(const ReductionPlan& p, ReductionKind kind, int64_t outer, int64_t reduced,
                    int64_t inner, int64_t outer_stride, int64_t reduced_stride,
                    int64_t inner_stride, bool needs_copy) {
  EXPECT_EQ(p.kind, kind) << "kind is " << reduction_kind_name(p.kind);
  EXPECT_EQ(p.outer, outer);
  EXPECT_EQ(p.reduced, reduced);
  EXPECT_EQ(p.inner, inner);
  EXPECT_EQ(p.outer_stride, outer_stride);
  EXPECT_EQ(p.reduced_stride, reduced_stride);
  EXPECT_EQ(p.inner_stride, inner_stride);
  EXPECT_EQ(p.needs_copy, needs_copy);
}

ReductionPlan plan_ok(const TensorView& x, const ReduceDims& dims, bool keepdim = false) {
  ReductionPlan p;
  const Status s = plan_reduction(x, dims, keepdim, &p);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return p;
}

RowwisePlan rowwise_ok(const TensorView& x, int64_t dim) {
  RowwisePlan p;
  const Status s = plan_rowwise(x, dim, &p);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return p;
}

void expect_rowwise(const RowwisePlan& p, int64_t rows, int64_t cols, int64_t row_stride,
                    bool row_major) {
  EXPECT_EQ(p.rows, rows);
  EXPECT_EQ(p.cols, cols);
  EXPECT_EQ(p.row_stride, row_stride);
  EXPECT_EQ(p.row_major, row_major);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// =============================================================================================
// plan_rowwise
// =============================================================================================

// shift_period: rows r and r + p start at the same offset in their 16-byte granule.
TEST(ShiftPeriod, RowsRepeatTheirMisalignment) {
  EXPECT_EQ(shift_period(50264, 4), 1);
  EXPECT_EQ(shift_period(50257, 4), 4);
  EXPECT_EQ(shift_period(50258, 4), 2);
  EXPECT_EQ(shift_period(50257, 2), 8);
  EXPECT_EQ(shift_period(50260, 2), 2);
  EXPECT_EQ(shift_period(50257, 8), 2);
  EXPECT_EQ(shift_period(0, 4), 1);
  EXPECT_EQ(shift_period(std::numeric_limits<int64_t>::max(), 8), 2) << "a one-row view's stride, any value";
  EXPECT_EQ(shift_period((int64_t(1) << 62) + 1, 4), 4);
  for (const int elem : {2, 4, 8})
    for (int64_t stride = 1; stride < 64; ++stride) {
      const int p = shift_period(stride, elem);
      EXPECT_EQ(p * stride * elem % 16, 0) << stride << " x " << elem;
      if (p > 1) EXPECT_NE(p / 2 * stride * elem % 16, 0) << "not the fewest: " << stride << " x " << elem;
    }
}

TEST(PlanRowwise, Contiguous1d) { expect_rowwise(rowwise_ok(dense({7}), 0), 1, 7, 7, true); }

TEST(PlanRowwise, Contiguous2dLastDim) {
  expect_rowwise(rowwise_ok(dense({4, 8}), 1), 4, 8, 8, true);
  expect_rowwise(rowwise_ok(dense({4, 8}), -1), 4, 8, 8, true);
}

TEST(PlanRowwise, Contiguous3dMergesLeadingDims) {
  expect_rowwise(rowwise_ok(make_view({4, 6, 8}, {48, 8, 1}), 2), 24, 8, 8, true);
}

TEST(PlanRowwise, Contiguous4d) {
  expect_rowwise(rowwise_ok(dense({2, 3, 4, 5}), -1), 24, 5, 5, true);
}

TEST(PlanRowwise, SlicedMiddleDimDoesNotMerge) {
  // dim 1 sliced from 12 to 6: 96 != 6 * 8, so rows are not one index.
  expect_rowwise(rowwise_ok(make_view({4, 6, 8}, {96, 8, 1}), 2), 24, 8, 8, false);
}

TEST(PlanRowwise, RowsAreSlicesOfWiderRows) {
  expect_rowwise(rowwise_ok(make_view({4, 8}, {16, 1}), 1), 4, 8, 16, true);
}

TEST(PlanRowwise, SlicedOuterDimKeepsInnerMerge) {
  // [4, 6, 8] taken from [8, 6, 8] with step 2 on dim 0: dims 0 and 1 still do not merge.
  expect_rowwise(rowwise_ok(make_view({4, 6, 8}, {96, 8, 1}), -1), 24, 8, 8, false);
  // [4, 6, 8] from [4, 6, 10]: rows of 8 inside rows of 10; dims 0, 1 merge with stride 10.
  expect_rowwise(rowwise_ok(make_view({4, 6, 8}, {60, 10, 1}), -1), 24, 8, 10, true);
}

TEST(PlanRowwise, StridedColumnsAreNotRowMajor) {
  expect_rowwise(rowwise_ok(make_view({4, 8}, {16, 2}), 1), 4, 8, 8, false);
}

TEST(PlanRowwise, NonLastDimOfContiguousIsNotRowMajor) {
  expect_rowwise(rowwise_ok(dense({4, 8}), 0), 8, 4, 4, false);
  expect_rowwise(rowwise_ok(dense({2, 3, 4}), 1), 8, 3, 3, false);
}

TEST(PlanRowwise, TransposedIsRowMajorOverTheStrideOneDim) {
  // x = y.t() for a contiguous y [8, 4]: x is [4, 8] strides [1, 4]; dim 0 has stride 1.
  const TensorView x = make_view({4, 8}, {1, 4});
  expect_rowwise(rowwise_ok(x, 0), 8, 4, 4, true);
  expect_rowwise(rowwise_ok(x, 1), 4, 8, 8, false);
}

TEST(PlanRowwise, SizeOneDimsNeverBlockMerging) {
  // Garbage strides on the size-1 dims, as torch leaves them after unsqueeze or slicing.
  expect_rowwise(rowwise_ok(make_view({1, 4, 1, 8}, {999, 8, 3, 1}), 3), 4, 8, 8, true);
  expect_rowwise(rowwise_ok(make_view({4, 1, 6, 8}, {48, 7, 8, 1}), -1), 24, 8, 8, true);
}

TEST(PlanRowwise, SingleColumnIgnoresItsStride) {
  // cols == 1: the dim's stride is never stepped.
  expect_rowwise(rowwise_ok(make_view({6, 1}, {1, 77}), 1), 6, 1, 1, true);
  expect_rowwise(rowwise_ok(make_view({6, 1}, {5, 77}), 1), 6, 1, 5, true);
}

TEST(PlanRowwise, SingleRowUsesDenseRowStride) {
  expect_rowwise(rowwise_ok(make_view({1, 8}, {123, 1}), 1), 1, 8, 8, true);
  expect_rowwise(rowwise_ok(make_view({8}, {1}), 0), 1, 8, 8, true);
}

TEST(PlanRowwise, ExpandedRowsHaveStrideZero) {
  expect_rowwise(rowwise_ok(make_view({5, 8}, {0, 1}), 1), 5, 8, 0, true);
}

TEST(PlanRowwise, ZeroSizeTensors) {
  expect_rowwise(rowwise_ok(make_view({0, 8}, {8, 1}), 1), 0, 8, 8, true);
  expect_rowwise(rowwise_ok(make_view({4, 0}, {0, 1}), 1), 4, 0, 0, true);
  // Odd strides on an empty tensor do not matter: nothing is read.
  expect_rowwise(rowwise_ok(make_view({3, 0, 5}, {1, 3, 7}), 2), 0, 5, 5, true);
  expect_rowwise(rowwise_ok(make_view({0}, {1}), 0), 1, 0, 0, true);
}

TEST(PlanRowwise, RankZero) {
  TensorView x;  // rank 0: one element
  expect_rowwise(rowwise_ok(x, 0), 1, 1, 1, true);
  expect_rowwise(rowwise_ok(x, -1), 1, 1, 1, true);
  RowwisePlan p;
  const Status s = plan_rowwise(x, 1, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 1 is out of range for a tensor of rank 0");
}

TEST(PlanRowwise, DimOutOfRange) {
  RowwisePlan p;
  Status s = plan_rowwise(dense({4, 8}), 3, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 3 is out of range for a tensor of rank 2");
  s = plan_rowwise(dense({4, 8}), 2, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = plan_rowwise(dense({4, 8}), -3, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: -3 is out of range for a tensor of rank 2");
  EXPECT_TRUE(plan_rowwise(dense({4, 8}), -2, &p).is_ok());
}

TEST(PlanRowwise, BadTensors) {
  RowwisePlan p;
  TensorView x = dense({4, 8});
  x.rank = 9;
  Status s = plan_rowwise(x, 0, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "x: rank 9")) << s.message();
  x.rank = -1;
  EXPECT_EQ(plan_rowwise(x, 0, &p).code(), StatusCode::kInvalidArgument);

  s = plan_rowwise(make_view({4, -8}, {8, 1}), 1, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "x: size -8 of dim 1")) << s.message();

  s = plan_rowwise(make_view({4, 8}, {-8, 1}), 1, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(contains(s.message(), "x: stride -8 of dim 0")) << s.message();

  s = plan_rowwise(make_view({int64_t{1} << 40, int64_t{1} << 40}, {int64_t{1} << 40, 1}), 1, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "overflows")) << s.message();

  s = plan_rowwise(dense({4, 8}), 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "plan")) << s.message();
}

TEST(PlanRowwise, NegativeStrideOnSizeOneDimIsAccepted) {
  expect_rowwise(rowwise_ok(make_view({1, 8}, {-5, 1}), 1), 1, 8, 8, true);
}

TEST(PlanRowwise, LargeExtentsStayInt64) {
  const int64_t big = int64_t{3} << 31;
  expect_rowwise(rowwise_ok(dense({4, big}), 1), 4, big, big, true);
  expect_rowwise(rowwise_ok(dense({big, 2}), 1), big, 2, 2, true);
}

TEST(PlanRowwise, FailedCallLeavesPlanUntouched) {
  RowwisePlan p;
  p.rows = 42;
  EXPECT_FALSE(plan_rowwise(dense({4, 8}), 5, &p).is_ok());
  EXPECT_EQ(p.rows, 42);
}

// =============================================================================================
// plan_reduction: canonical forms
// =============================================================================================

TEST(PlanReduction, Contiguous1dIsAll) {
  const ReductionPlan p = plan_ok(dense({10}), ReduceDims::of({0}));
  expect_problem(p, ReductionKind::kAll, 1, 10, 1, 10, 1, 1, false);
  EXPECT_EQ(p.out_rank, 0);
  EXPECT_EQ(p.out_numel, 1);
  EXPECT_EQ(mask(p, 1), std::vector<bool>({true}));
  EXPECT_EQ(permutation(p, 1), std::vector<int>({0}));
}

// Where x starts decides which runs may load as whole vectors (plan_reduce_kernel's `aligned`).
TEST(PlanReduction, BaseAlignedFollowsTheFirstElement) {
  alignas(16) static float storage[8];
  TensorView x = dense({2, 3});
  x.data = storage;
  EXPECT_TRUE(plan_ok(x, ReduceDims::of({1})).base_aligned);
  x.data = storage + 1;
  EXPECT_FALSE(plan_ok(x, ReduceDims::of({1})).base_aligned);
  x.data = storage + 4;
  EXPECT_TRUE(plan_ok(x, ReduceDims::of({0})).base_aligned);
}

TEST(PlanReduction, Contiguous2dLastDimIsRow) {
  const ReductionPlan p = plan_ok(dense({4, 8}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 4, 8, 1, 8, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4}));
  EXPECT_EQ(p.out_numel, 4);
  EXPECT_EQ(mask(p, 2), std::vector<bool>({false, true}));
  EXPECT_EQ(permutation(p, 2), std::vector<int>({0, 1}));
}

TEST(PlanReduction, Contiguous2dFirstDimIsColumn) {
  const ReductionPlan p = plan_ok(dense({4, 8}), ReduceDims::of({0}));
  expect_problem(p, ReductionKind::kColumn, 1, 4, 8, 32, 8, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({8}));
  EXPECT_EQ(p.out_numel, 8);
  EXPECT_EQ(permutation(p, 2), std::vector<int>({1, 0}));
}

TEST(PlanReduction, Contiguous3dDim0IsColumnWithMergedInner) {
  const ReductionPlan p = plan_ok(dense({3, 4, 5}), ReduceDims::of({0}));
  expect_problem(p, ReductionKind::kColumn, 1, 3, 20, 60, 20, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4, 5}));
  EXPECT_EQ(p.out_numel, 20);
}

TEST(PlanReduction, Contiguous3dMiddleDimIsColumn) {
  const ReductionPlan p = plan_ok(dense({3, 4, 5}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kColumn, 3, 4, 5, 20, 5, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({3, 5}));
  EXPECT_EQ(p.out_numel, 15);
  EXPECT_EQ(mask(p, 3), std::vector<bool>({false, true, false}));
  EXPECT_EQ(permutation(p, 3), std::vector<int>({0, 2, 1}));
}

TEST(PlanReduction, Contiguous3dTrailingDimsMergeIntoRow) {
  const ReductionPlan p = plan_ok(dense({3, 4, 5}), ReduceDims::of({1, 2}));
  expect_problem(p, ReductionKind::kRow, 3, 20, 1, 20, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({3}));
  // The order the dims are named in does not matter.
  const ReductionPlan q = plan_ok(dense({3, 4, 5}), ReduceDims::of({2, 1}));
  expect_problem(q, ReductionKind::kRow, 3, 20, 1, 20, 1, 1, false);
}

TEST(PlanReduction, Contiguous3dLeadingDimsMergeIntoColumn) {
  const ReductionPlan p = plan_ok(dense({3, 4, 5}), ReduceDims::of({0, 1}));
  expect_problem(p, ReductionKind::kColumn, 1, 12, 5, 60, 5, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({5}));
}

TEST(PlanReduction, Contiguous3dOuterAndInnerDimsNeedCopy) {
  const ReductionPlan p = plan_ok(dense({3, 4, 5}), ReduceDims::of({0, 2}));
  expect_problem(p, ReductionKind::kRow, 4, 15, 1, 15, 1, 1, true);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4}));
  EXPECT_EQ(p.out_numel, 4);
  EXPECT_EQ(mask(p, 3), std::vector<bool>({true, false, true}));
  EXPECT_EQ(permutation(p, 3), std::vector<int>({1, 0, 2}));
}

TEST(PlanReduction, Contiguous4dCases) {
  const TensorView x = dense({2, 3, 4, 5});
  expect_problem(plan_ok(x, ReduceDims::of({3})), ReductionKind::kRow, 24, 5, 1, 5, 1, 1, false);
  expect_problem(plan_ok(x, ReduceDims::of({2, 3})), ReductionKind::kRow, 6, 20, 1, 20, 1, 1,
                 false);
  expect_problem(plan_ok(x, ReduceDims::of({1})), ReductionKind::kColumn, 2, 3, 20, 60, 20, 1,
                 false);
  expect_problem(plan_ok(x, ReduceDims::of({1, 2})), ReductionKind::kColumn, 2, 12, 5, 60, 5, 1,
                 false);
  // NCHW batch-norm statistics: reduce N, H, W -> per-channel, not mergeable as laid out.
  const ReductionPlan bn = plan_ok(x, ReduceDims::of({0, 2, 3}));
  expect_problem(bn, ReductionKind::kRow, 3, 40, 1, 40, 1, 1, true);
  EXPECT_EQ(permutation(bn, 4), std::vector<int>({1, 0, 2, 3}));
  // Kept dims 0 and 2 around reduced 1 and 3: not one of the forms either.
  const ReductionPlan q = plan_ok(x, ReduceDims::of({1, 3}));
  expect_problem(q, ReductionKind::kRow, 8, 15, 1, 15, 1, 1, true);
  EXPECT_EQ(out_shape(q), std::vector<int64_t>({2, 4}));
  EXPECT_EQ(permutation(q, 4), std::vector<int>({0, 2, 1, 3}));
}

TEST(PlanReduction, ChannelsLastBatchNormIsColumn) {
  // NCHW sizes [2, 3, 4, 5] in channels-last memory: strides [60, 1, 15, 3]. Reducing N, H, W
  // leaves C (stride 1) as the coalesced inner extent; N, H, W merge into one K run.
  const ReductionPlan p =
      plan_ok(make_view({2, 3, 4, 5}, {60, 1, 15, 3}), ReduceDims::of({0, 2, 3}));
  expect_problem(p, ReductionKind::kColumn, 1, 40, 3, 120, 3, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({3}));
}

TEST(PlanReduction, AllDimsOfContiguousIsAll) {
  const ReductionPlan p = plan_ok(dense({2, 3, 4, 5}), ReduceDims::all_dims());
  expect_problem(p, ReductionKind::kAll, 1, 120, 1, 120, 1, 1, false);
  EXPECT_EQ(p.out_rank, 0);
  EXPECT_EQ(p.out_numel, 1);
  EXPECT_EQ(mask(p, 4), std::vector<bool>({true, true, true, true}));
  EXPECT_EQ(permutation(p, 4), std::vector<int>({0, 1, 2, 3}));
  // Naming every dim is the same as dim=None.
  const ReductionPlan q = plan_ok(dense({2, 3, 4, 5}), ReduceDims::of({3, 0, 2, 1}));
  expect_problem(q, ReductionKind::kAll, 1, 120, 1, 120, 1, 1, false);
}

TEST(PlanReduction, AllDimsKeepdim) {
  const ReductionPlan p = plan_ok(dense({2, 3, 4}), ReduceDims::all_dims(), /*keepdim=*/true);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({1, 1, 1}));
  EXPECT_EQ(p.out_numel, 1);
  EXPECT_EQ(p.kind, ReductionKind::kAll);
}

// --- transposed and permuted ------------------------------------------------------------------

TEST(PlanReduction, Transposed2dDim0IsRow) {
  // x = y.t(), y contiguous [8, 4]: x [4, 8] strides [1, 4]. Dim 0 has stride 1.
  const ReductionPlan p = plan_ok(make_view({4, 8}, {1, 4}), ReduceDims::of({0}));
  expect_problem(p, ReductionKind::kRow, 8, 4, 1, 4, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({8}));
}

TEST(PlanReduction, Transposed2dDim1IsColumn) {
  const ReductionPlan p = plan_ok(make_view({4, 8}, {1, 4}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kColumn, 1, 8, 4, 32, 4, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4}));
}

TEST(PlanReduction, Transposed2dAllIsAll) {
  // Reducing everything does not care about the order: a dense block is a dense block.
  const ReductionPlan p = plan_ok(make_view({4, 8}, {1, 4}), ReduceDims::all_dims());
  expect_problem(p, ReductionKind::kAll, 1, 32, 1, 32, 1, 1, false);
}

TEST(PlanReduction, KeptDimsMergeAcrossAReducedDim) {
  // [A, B, C] laid out as [B, A, C] in memory: strides [C, A*C, 1]. Reducing B leaves A and C
  // as one contiguous run of A*C outputs.
  const ReductionPlan p = plan_ok(make_view({3, 4, 5}, {5, 15, 1}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kColumn, 1, 4, 15, 60, 15, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({3, 5}));
}

TEST(PlanReduction, PermutedKeptDimsNeedCopy) {
  // x = y.permute(2, 0, 1), y contiguous [3, 4, 5] -> x [5, 3, 4] strides [1, 20, 5]. Reducing
  // dim 1 keeps dims 0 (stride 1) then 2 (stride 5): output order does not match memory.
  const ReductionPlan p = plan_ok(make_view({5, 3, 4}, {1, 20, 5}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 20, 3, 1, 3, 1, 1, true);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({5, 4}));
  EXPECT_EQ(permutation(p, 3), std::vector<int>({0, 2, 1}));
}

TEST(PlanReduction, PermutedReducedDimsMerge) {
  // Same x, reduce dims 1 and 2 (strides 20 and 5): they merge into K = 12, stride 5, while
  // kept dim 0 has stride 1 -> column with M = 1.
  const ReductionPlan p = plan_ok(make_view({5, 3, 4}, {1, 20, 5}), ReduceDims::of({1, 2}));
  expect_problem(p, ReductionKind::kColumn, 1, 12, 5, 60, 5, 1, false);
}

// --- sliced ---------------------------------------------------------------------------------

TEST(PlanReduction, SlicedRowsAreRow) {
  const ReductionPlan p = plan_ok(make_view({4, 8}, {16, 1}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 4, 8, 1, 16, 1, 1, false);
}

TEST(PlanReduction, SlicedRowsColumnReduction) {
  const ReductionPlan p = plan_ok(make_view({4, 8}, {16, 1}), ReduceDims::of({0}));
  expect_problem(p, ReductionKind::kColumn, 1, 4, 8, 32, 16, 1, false);
}

TEST(PlanReduction, SlicedMiddleDimColumnReduction) {
  // [4, 6, 8] strides [96, 8, 1]: dim 1 sliced. Reducing dim 1 is still a clean column.
  const ReductionPlan p = plan_ok(make_view({4, 6, 8}, {96, 8, 1}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kColumn, 4, 6, 8, 96, 8, 1, false);
}

TEST(PlanReduction, SlicedMiddleDimRowReductionNeedsCopy) {
  // Reducing the last dim: kept dims 0 and 1 do not merge (96 != 6 * 8).
  const ReductionPlan p = plan_ok(make_view({4, 6, 8}, {96, 8, 1}), ReduceDims::of({2}));
  expect_problem(p, ReductionKind::kRow, 24, 8, 1, 8, 1, 1, true);
  EXPECT_EQ(permutation(p, 3), std::vector<int>({0, 1, 2}));
}

TEST(PlanReduction, SlicedAllNeedsCopy) {
  const ReductionPlan p = plan_ok(make_view({4, 8}, {16, 1}), ReduceDims::all_dims());
  expect_problem(p, ReductionKind::kAll, 1, 32, 1, 32, 1, 1, true);
}

TEST(PlanReduction, SteppedLastDimNeedsCopy) {
  // x[:, ::2]: the reduced run is not contiguous.
  const ReductionPlan p = plan_ok(make_view({4, 8}, {16, 2}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 4, 8, 1, 8, 1, 1, true);
  // And a stepped inner kept dim cannot be the coalesced N of a column.
  const ReductionPlan q = plan_ok(make_view({4, 8}, {16, 2}), ReduceDims::of({0}));
  expect_problem(q, ReductionKind::kRow, 8, 4, 1, 4, 1, 1, true);
  EXPECT_EQ(permutation(q, 2), std::vector<int>({1, 0}));
  // A stepped 1-d tensor reduced fully: one output, copied first.
  const ReductionPlan r = plan_ok(make_view({8}, {2}), ReduceDims::of({0}));
  expect_problem(r, ReductionKind::kAll, 1, 8, 1, 8, 1, 1, true);
}

TEST(PlanReduction, ExpandedInputsNeedNoCopy) {
  // x = y.expand(5, 8) for y [8]: rows share memory (stride 0); reading is fine.
  expect_problem(plan_ok(make_view({5, 8}, {0, 1}), ReduceDims::of({1})), ReductionKind::kRow, 5,
                 8, 1, 0, 1, 1, false);
  expect_problem(plan_ok(make_view({5, 8}, {0, 1}), ReduceDims::of({0})), ReductionKind::kColumn,
                 1, 5, 8, 40, 0, 1, false);
}

// --- size-1 dims ----------------------------------------------------------------------------

TEST(PlanReduction, SizeOneDimsAnywhereDoNotBlockMerging) {
  // [1, 3, 1, 4, 1] with garbage strides on the size-1 dims.
  const TensorView x = make_view({1, 3, 1, 4, 1}, {77, 4, -3, 1, 999});
  expect_problem(plan_ok(x, ReduceDims::of({3})), ReductionKind::kRow, 3, 4, 1, 4, 1, 1, false);
  expect_problem(plan_ok(x, ReduceDims::of({1})), ReductionKind::kColumn, 1, 3, 4, 12, 4, 1,
                 false);
  // Kept size-1 dims: one output, a row (the row path's bits), not kAll.
  expect_problem(plan_ok(x, ReduceDims::of({1, 2, 3})), ReductionKind::kRow, 1, 12, 1, 12, 1, 1,
                 false);
  expect_problem(plan_ok(x, ReduceDims::all_dims()), ReductionKind::kAll, 1, 12, 1, 12, 1, 1,
                 false);
  const ReductionPlan k = plan_ok(x, ReduceDims::of({0, 3}), /*keepdim=*/true);
  expect_problem(k, ReductionKind::kRow, 3, 4, 1, 4, 1, 1, false);
  EXPECT_EQ(out_shape(k), std::vector<int64_t>({1, 3, 1, 1, 1}));
  EXPECT_EQ(k.out_numel, 3);
}

TEST(PlanReduction, ReducingOnlySizeOneDimsIsExtentOne) {
  // [4, 1, 8] reduce dim 1: no real reduction, one element per output.
  const ReductionPlan p = plan_ok(dense({4, 1, 8}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 32, 1, 1, 1, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4, 8}));
  EXPECT_EQ(p.out_numel, 32);
  const ReductionPlan k = plan_ok(dense({4, 1, 8}), ReduceDims::of({1}), true);
  EXPECT_EQ(out_shape(k), std::vector<int64_t>({4, 1, 8}));
}

TEST(PlanReduction, ReducingNothingOfSlicedRowsIsColumnWithKOne) {
  // [4, 8] strides [16, 1], no dims: kept dims do not merge, but a K = 1 column covers it.
  const ReductionPlan p = plan_ok(make_view({4, 8}, {16, 1}), ReduceDims());
  expect_problem(p, ReductionKind::kColumn, 4, 1, 8, 16, 8, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4, 8}));
  EXPECT_EQ(p.out_numel, 32);
  EXPECT_EQ(mask(p, 2), std::vector<bool>({false, false}));
}

TEST(PlanReduction, ReducingNothingOfTransposedNeedsCopy) {
  const ReductionPlan p = plan_ok(make_view({4, 8}, {1, 4}), ReduceDims());
  expect_problem(p, ReductionKind::kRow, 32, 1, 1, 1, 1, 1, true);
}

// A slice keeps the bits of the whole tensor's rows and columns: one row of [4, 8] (x[i:i+1]
// over dim 1) is kRow, not kAll, and one column (x[:, j:j+1] over dim 0) a kColumn of inner
// extent 1 at its stride, not a copy.
TEST(PlanReduction, SlicedRowsAndColumnsKeepTheirKind) {
  expect_problem(plan_ok(make_view({1, 8}, {8, 1}), ReduceDims::of({1})), ReductionKind::kRow, 1, 8, 1, 8, 1, 1,
                 false);
  expect_problem(plan_ok(make_view({1, 8}, {8, 1}), ReduceDims::all_dims()), ReductionKind::kAll, 1, 8, 1, 8, 1, 1,
                 false);
  const ReductionPlan c = plan_ok(make_view({6, 1}, {5, 1}), ReduceDims::of({0}));
  expect_problem(c, ReductionKind::kColumn, 1, 6, 1, 30, 5, 1, false);
  EXPECT_EQ(out_shape(c), std::vector<int64_t>({1}));
  // Over every dim the same strided run is a copy: kAll reads one dense segment.
  EXPECT_TRUE(plan_ok(make_view({6, 1}, {5, 1}), ReduceDims::all_dims()).needs_copy);
}

// argmax / argmin count the reduced set in x's dim order: a transposed layout whose reduced dims
// merge in memory order is planned as a copy for them (reduced_in_dim_order), in place otherwise.
TEST(PlanReduction, IndexOpsKeepTheReducedDimsOrder) {
  const TensorView t = make_view({4, 5}, {1, 4});  // a transposed [5, 4]
  ReductionPlan p;
  ASSERT_TRUE(plan_reduction(t, ReduceDims::all_dims(), false, &p, true).is_ok());
  EXPECT_TRUE(p.needs_copy);
  expect_problem(p, ReductionKind::kAll, 1, 20, 1, 20, 1, 1, true);
  EXPECT_FALSE(plan_ok(t, ReduceDims::all_dims()).needs_copy) << "a sum may walk memory order";
  ASSERT_TRUE(plan_reduction(dense({4, 5}), ReduceDims::all_dims(), false, &p, true).is_ok());
  EXPECT_FALSE(p.needs_copy) << "dims already in memory order";
  ASSERT_TRUE(plan_reduction(t, ReduceDims::of({1}), false, &p, true).is_ok());
  EXPECT_FALSE(p.needs_copy) << "one reduced dim has one order";
}

TEST(PlanReduction, AllSizeOneTensor) {
  const TensorView x = make_view({1, 1, 1}, {5, 9, 2});
  const ReductionPlan p = plan_ok(x, ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 1, 1, 1, 1, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({1, 1}));
  EXPECT_EQ(p.out_numel, 1);
}

// --- zero-size dims ---------------------------------------------------------------------------

TEST(PlanReduction, ZeroSizeReducedDimIsEmptyReduction) {
  const ReductionPlan p = plan_ok(dense({4, 0}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 4, 0, 1, 0, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({4}));
  EXPECT_EQ(p.out_numel, 4);
}

TEST(PlanReduction, ZeroSizeKeptDimMeansNoOutputs) {
  const ReductionPlan p = plan_ok(dense({0, 8}), ReduceDims::of({1}));
  expect_problem(p, ReductionKind::kRow, 0, 8, 1, 8, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({0}));
  EXPECT_EQ(p.out_numel, 0);
}

TEST(PlanReduction, ZeroSizeAllIsEmptyAll) {
  const ReductionPlan p = plan_ok(dense({3, 0, 5}), ReduceDims::all_dims(), true);
  expect_problem(p, ReductionKind::kAll, 1, 0, 1, 0, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({1, 1, 1}));
  EXPECT_EQ(p.out_numel, 1);
}

TEST(PlanReduction, ZeroSizeNeverNeedsCopy) {
  // A layout that would need a copy if it held anything.
  const ReductionPlan p = plan_ok(make_view({0, 3, 4}, {1, 7, 100}), ReduceDims::of({0, 2}));
  expect_problem(p, ReductionKind::kRow, 3, 0, 1, 0, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({3}));
  EXPECT_EQ(permutation(p, 3), std::vector<int>({1, 0, 2}));
}

// --- rank 0 -----------------------------------------------------------------------------------

TEST(PlanReduction, RankZero) {
  const TensorView x;  // one element
  for (const ReduceDims& dims : {ReduceDims::all_dims(), ReduceDims::of({0}), ReduceDims::of({-1}),
                                 ReduceDims()}) {
    for (bool keepdim : {false, true}) {
      const ReductionPlan p = plan_ok(x, dims, keepdim);
      expect_problem(p, ReductionKind::kAll, 1, 1, 1, 1, 1, 1, false);
      EXPECT_EQ(p.out_rank, 0);
      EXPECT_EQ(p.out_numel, 1);
    }
  }
  ReductionPlan p;
  Status s = plan_reduction(x, ReduceDims::of({1}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 1 is out of range for a tensor of rank 0");
  s = plan_reduction(x, ReduceDims::of({0, -1}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 0 appears twice");
}

// --- dims: negative, keepdim, errors ----------------------------------------------------------

TEST(PlanReduction, NegativeDimsWrap) {
  const TensorView x = dense({3, 4, 5});
  const ReductionPlan a = plan_ok(x, ReduceDims::of({-1}));
  expect_problem(a, ReductionKind::kRow, 12, 5, 1, 5, 1, 1, false);
  const ReductionPlan b = plan_ok(x, ReduceDims::of({-2}));
  expect_problem(b, ReductionKind::kColumn, 3, 4, 5, 20, 5, 1, false);
  EXPECT_EQ(mask(b, 3), std::vector<bool>({false, true, false}));
  const ReductionPlan c = plan_ok(x, ReduceDims::of({-3, 2}));
  expect_problem(c, ReductionKind::kRow, 4, 15, 1, 15, 1, 1, true);
}

TEST(PlanReduction, KeepdimShapes) {
  const TensorView x = dense({2, 3, 4, 5});
  EXPECT_EQ(out_shape(plan_ok(x, ReduceDims::of({1}), true)),
            std::vector<int64_t>({2, 1, 4, 5}));
  EXPECT_EQ(out_shape(plan_ok(x, ReduceDims::of({1}), false)), std::vector<int64_t>({2, 4, 5}));
  EXPECT_EQ(out_shape(plan_ok(x, ReduceDims::of({0, -1}), true)),
            std::vector<int64_t>({1, 3, 4, 1}));
  EXPECT_EQ(out_shape(plan_ok(x, ReduceDims::of({0, -1}), false)), std::vector<int64_t>({3, 4}));
  // keepdim changes only the output shape, never the problem.
  const ReductionPlan a = plan_ok(x, ReduceDims::of({1, 2}), true);
  const ReductionPlan b = plan_ok(x, ReduceDims::of({1, 2}), false);
  expect_problem(a, b.kind, b.outer, b.reduced, b.inner, b.outer_stride, b.reduced_stride,
                 b.inner_stride, b.needs_copy);
  EXPECT_EQ(a.out_numel, b.out_numel);
  EXPECT_EQ(a.out_numel, 10);
}

TEST(PlanReduction, DimGivenTwice) {
  ReductionPlan p;
  Status s = plan_reduction(dense({3, 4, 5}), ReduceDims::of({1, 1}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 1 appears twice");
  // Also when spelled differently.
  s = plan_reduction(dense({3, 4, 5}), ReduceDims::of({0, 1, -2}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 1 appears twice");
}

TEST(PlanReduction, DimOutOfRange) {
  ReductionPlan p;
  Status s = plan_reduction(dense({4, 8}), ReduceDims::of({3}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: 3 is out of range for a tensor of rank 2");
  s = plan_reduction(dense({4, 8}), ReduceDims::of({0, -3}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dim: -3 is out of range for a tensor of rank 2");
  s = plan_reduction(dense({4, 8}), ReduceDims::of({2}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "dim")) << s.message();
}

TEST(PlanReduction, TooManyDims) {
  ReductionPlan p;
  const ReduceDims dims = ReduceDims::of({0, 1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(dims.count, 9);
  Status s = plan_reduction(dense({2, 2, 2, 2, 2, 2, 2, 2}), dims, false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "dim: 9 dims given")) << s.message();
  ReduceDims negative;
  negative.count = -1;
  EXPECT_EQ(plan_reduction(dense({2}), negative, false, &p).code(), StatusCode::kInvalidArgument);
}

TEST(PlanReduction, BadTensorsAndNullPlan) {
  ReductionPlan p;
  TensorView x = dense({4, 8});
  x.rank = 9;
  EXPECT_EQ(plan_reduction(x, ReduceDims::all_dims(), false, &p).code(),
            StatusCode::kInvalidArgument);
  Status s = plan_reduction(make_view({4, -1}, {1, 1}), ReduceDims::all_dims(), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "x: size -1 of dim 1")) << s.message();
  s = plan_reduction(make_view({4, 8}, {8, -1}), ReduceDims::of({0}), false, &p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  s = plan_reduction(dense({4, 8}), ReduceDims::of({0}), false, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "plan")) << s.message();
}

TEST(PlanReduction, Rank8) {
  const TensorView x = dense({2, 1, 3, 1, 2, 1, 2, 3});
  const ReductionPlan p = plan_ok(x, ReduceDims::of({6, 7}));
  expect_problem(p, ReductionKind::kRow, 12, 6, 1, 6, 1, 1, false);
  EXPECT_EQ(out_shape(p), std::vector<int64_t>({2, 1, 3, 1, 2, 1}));
  const ReductionPlan q = plan_ok(x, ReduceDims::of({0, 1, 2, 3, 4, 5, 6, 7}));
  expect_problem(q, ReductionKind::kAll, 1, 72, 1, 72, 1, 1, false);
}

TEST(PlanReduction, LargeExtentsStayInt64) {
  const int64_t big = int64_t{3} << 31;
  expect_problem(plan_ok(dense({4, big}), ReduceDims::of({1})), ReductionKind::kRow, 4, big, 1,
                 big, 1, 1, false);
  expect_problem(plan_ok(dense({big, 4}), ReduceDims::of({0})), ReductionKind::kColumn, 1, big, 4,
                 4 * big, 4, 1, false);
}

TEST(PlanReduction, OverflowingStrideProductDoesNotMerge) {
  // Huge strides whose product with a size wraps must not fake a merge.
  const int64_t s = int64_t{1} << 62;
  const ReductionPlan p = plan_ok(make_view({2, 4}, {0, s}), ReduceDims::of({0, 1}));
  EXPECT_TRUE(p.needs_copy);
}

// =============================================================================================
// Brute force: on random layouts, each plan reads exactly the elements of each output.
// =============================================================================================

// Offset of the element at multi-index idx.
int64_t offset_of(const TensorView& x, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (int d = 0; d < x.rank; ++d) off += idx[d] * x.strides[d];
  return off;
}

// Visits every multi-index of `sizes` in row-major order.
template <typename F>
void for_each_index(const std::vector<int64_t>& sizes, F f) {
  for (int64_t s : sizes) {
    if (s == 0) return;
  }
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    f(idx);
    int d = static_cast<int>(sizes.size()) - 1;
    while (d >= 0 && ++idx[d] == sizes[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

// For each output (dense, kept dims in order), the sorted x offsets a reduction combines.
std::vector<std::vector<int64_t>> expected_offsets(const TensorView& x, const bool* reduced) {
  std::vector<int> kept_dims, red_dims;
  for (int d = 0; d < x.rank; ++d) (reduced[d] ? red_dims : kept_dims).push_back(d);
  std::vector<int64_t> kept_sizes, red_sizes;
  for (int d : kept_dims) kept_sizes.push_back(x.sizes[d]);
  for (int d : red_dims) red_sizes.push_back(x.sizes[d]);
  std::vector<std::vector<int64_t>> out;
  for_each_index(kept_sizes, [&](const std::vector<int64_t>& k) {
    std::vector<int64_t> offs;
    for_each_index(red_sizes, [&](const std::vector<int64_t>& r) {
      std::vector<int64_t> idx(x.rank);
      for (size_t i = 0; i < kept_dims.size(); ++i) idx[kept_dims[i]] = k[i];
      for (size_t i = 0; i < red_dims.size(); ++i) idx[red_dims[i]] = r[i];
      offs.push_back(offset_of(x, idx));
    });
    std::sort(offs.begin(), offs.end());
    out.push_back(offs);
  });
  return out;
}

// The same, but read through the plan; with needs_copy, through the permuted contiguous copy.
std::vector<std::vector<int64_t>> planned_offsets(const TensorView& x, const ReductionPlan& p) {
  // copy_to_x[i]: the x offset of element i of the copy (identity when no copy is made).
  std::vector<int64_t> copy_to_x;
  if (p.needs_copy) {
    std::vector<int64_t> perm_sizes;
    for (int i = 0; i < x.rank; ++i) perm_sizes.push_back(x.sizes[p.permutation[i]]);
    for_each_index(perm_sizes, [&](const std::vector<int64_t>& pi) {
      std::vector<int64_t> idx(x.rank);
      for (int i = 0; i < x.rank; ++i) idx[p.permutation[i]] = pi[i];
      copy_to_x.push_back(offset_of(x, idx));
    });
    if (x.rank == 0) copy_to_x.push_back(0);
  }
  auto to_x = [&](int64_t off) { return p.needs_copy ? copy_to_x.at(off) : off; };

  std::vector<std::vector<int64_t>> out(p.out_numel);
  switch (p.kind) {
    case ReductionKind::kAll:
      for (int64_t i = 0; i < p.reduced; ++i) out.at(0).push_back(to_x(i));
      break;
    case ReductionKind::kRow:
      for (int64_t m = 0; m < p.outer; ++m)
        for (int64_t j = 0; j < p.reduced; ++j)
          out.at(m).push_back(to_x(m * p.outer_stride + j * p.reduced_stride));
      break;
    case ReductionKind::kColumn:
      for (int64_t m = 0; m < p.outer; ++m)
        for (int64_t n = 0; n < p.inner; ++n)
          for (int64_t k = 0; k < p.reduced; ++k)
            out.at(m * p.inner + n)
                .push_back(to_x(m * p.outer_stride + k * p.reduced_stride + n * p.inner_stride));
      break;
  }
  for (auto& o : out) std::sort(o.begin(), o.end());
  return out;
}

// A random strided layout: sizes 0..4 (mostly >= 1), dims laid out in a random memory order,
// sometimes stepped (stride x2), padded (gaps between rows) or expanded (stride 0), with garbage
// strides on size-1 dims.
TensorView random_view(std::mt19937* rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(*rng); };
  TensorView x;
  x.rank = uniform(1, 5);
  for (int d = 0; d < x.rank; ++d) x.sizes[d] = uniform(0, 20) == 0 ? 0 : uniform(1, 4);
  std::vector<int> order(x.rank);
  for (int d = 0; d < x.rank; ++d) order[d] = d;
  std::shuffle(order.begin(), order.end(), *rng);  // order[0] is outermost in memory
  int64_t cur = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    const int d = order[i];
    const int pick = uniform(0, 9);
    const int64_t step = pick == 0 ? 2 : 1;
    if (pick == 1) {
      x.strides[d] = 0;  // expanded: no memory of its own
      continue;
    }
    x.strides[d] = cur * step;
    cur = x.strides[d] * x.sizes[d] + (uniform(0, 5) == 0 ? 1 : 0);
    if (cur == 0) cur = 1;
  }
  for (int d = 0; d < x.rank; ++d) {
    if (x.sizes[d] == 1 && uniform(0, 2) == 0) x.strides[d] = uniform(-5, 50);
  }
  return x;
}

ReduceDims random_dims(std::mt19937* rng, int rank) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(*rng); };
  if (uniform(0, 7) == 0) return ReduceDims::all_dims();
  std::vector<int64_t> chosen;
  for (int d = 0; d < rank; ++d) {
    if (uniform(0, 1)) chosen.push_back(uniform(0, 1) ? d : d - rank);  // negative half the time
  }
  std::shuffle(chosen.begin(), chosen.end(), *rng);
  ReduceDims dims;
  dims.count = static_cast<int>(chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) dims.dims[i] = chosen[i];
  return dims;
}

std::string describe(const TensorView& x, const ReduceDims& dims) {
  std::string s = "sizes [";
  for (int d = 0; d < x.rank; ++d) s += std::to_string(x.sizes[d]) + (d + 1 < x.rank ? ", " : "");
  s += "] strides [";
  for (int d = 0; d < x.rank; ++d) s += std::to_string(x.strides[d]) + (d + 1 < x.rank ? ", " : "");
  s += "] dims ";
  if (dims.all) return s + "all";
  s += "{";
  for (int i = 0; i < dims.count; ++i) s += std::to_string(dims.dims[i]) + " ";
  return s + "}";
}

TEST(PlanReductionBruteForce, RandomLayoutsReadExactlyTheRightElements) {
  std::mt19937 rng(12345);
  int copies = 0, rows = 0, columns = 0, alls = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const TensorView x = random_view(&rng);
    const ReduceDims dims = random_dims(&rng, x.rank);
    const bool keepdim = trial % 2 == 1;
    SCOPED_TRACE(describe(x, dims));
    ReductionPlan p;
    ASSERT_TRUE(plan_reduction(x, dims, keepdim, &p).is_ok());

    // Output shape and count agree with the mask.
    int64_t out_numel = 1;
    std::vector<int64_t> shape;
    for (int d = 0; d < x.rank; ++d) {
      if (!p.reduced_mask[d]) {
        shape.push_back(x.sizes[d]);
        out_numel *= x.sizes[d];
      } else if (keepdim) {
        shape.push_back(1);
      }
    }
    ASSERT_EQ(out_shape(p), shape);
    ASSERT_EQ(p.out_numel, out_numel);

    // The contract on strides and extents of each kind.
    switch (p.kind) {
      case ReductionKind::kRow:
        ASSERT_EQ(p.outer, p.out_numel);
        ASSERT_EQ(p.reduced_stride, 1);
        ASSERT_EQ(p.inner, 1);
        ++rows;
        break;
      case ReductionKind::kColumn:
        ASSERT_EQ(p.outer * p.inner, p.out_numel);
        ASSERT_GE(p.inner, 1);
        ASSERT_EQ(p.inner_stride, 1);
        ASSERT_FALSE(p.needs_copy);
        ++columns;
        break;
      case ReductionKind::kAll:
        ASSERT_EQ(p.out_numel, 1);
        for (int d = 0; d < x.rank; ++d) ASSERT_TRUE(p.reduced_mask[d]) << "kAll keeps no dim";
        ASSERT_EQ(p.outer, 1);
        ASSERT_EQ(p.inner, 1);
        ASSERT_EQ(p.reduced_stride, 1);
        ++alls;
        break;
    }
    if (p.out_numel > 0) {
      ASSERT_EQ(p.reduced * p.out_numel, x.numel());
    }
    copies += p.needs_copy;

    ASSERT_EQ(planned_offsets(x, p), expected_offsets(x, p.reduced_mask));
  }
  // The generator must exercise every path, or this test proves little.
  EXPECT_GT(copies, 100);
  EXPECT_GT(rows, 100);
  EXPECT_GT(columns, 100);
  EXPECT_GT(alls, 100);
}

TEST(PlanReductionBruteForce, DenseLayoutsNeverCopyForSuffixOrPrefixDims) {
  // On any contiguous tensor, reducing a suffix of dims is a row and a run of dims is a column:
  // never a copy.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    TensorView x = random_view(&rng);
    int64_t stride = 1;
    for (int d = x.rank - 1; d >= 0; --d) {
      x.sizes[d] = std::max<int64_t>(x.sizes[d], 1);
      x.strides[d] = stride;
      stride *= x.sizes[d];
    }
    const int begin = std::uniform_int_distribution<int>(0, x.rank - 1)(rng);
    const int end = std::uniform_int_distribution<int>(begin + 1, x.rank)(rng);
    ReduceDims dims;
    for (int d = begin; d < end; ++d) dims.dims[dims.count++] = d;
    SCOPED_TRACE(describe(x, dims));
    const ReductionPlan p = plan_ok(x, dims);
    EXPECT_FALSE(p.needs_copy);
  }
}

// ---- randomized properties at the extremes of the API ---------------------------------------

// shift_period at any stride: every residue mod 16 bytes, any magnitude, negative ones (a size-1
// dim's stride may be anything, so a one-row view's may be) and int64's extremes. cross_entropy's
// launch_row_classes runs rows c, c + p, c + 2p, ... on the kernel of row c's shift, so every row
// of a class must start at row c's offset in its 16-byte granule; and p must be the fewest rows
// that do (each class is a launch).
TEST(ShiftPeriodRandom, EveryRowOfAClassStartsAtItsFirstRowsShift) {
  std::mt19937_64 rng(0x5eed5);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t residue = static_cast<int64_t>(rng() % 16);
    int64_t stride = 0;
    switch (rng() % 4) {
      case 0: stride = static_cast<int64_t>((rng() & ~uint64_t(15)) | uint64_t(residue)); break;  // any size or sign
      case 1: stride = kMax - residue; break;
      case 2: stride = kMin + residue; break;
      default: stride = static_cast<int64_t>(rng() % 4096) - 2048; break;
    }
    const int elem = 2 << (rng() % 3);
    const int p = shift_period(stride, elem);
    SCOPED_TRACE(testing::Message() << "stride " << stride << " x " << elem << " bytes: period " << p);
    ASSERT_TRUE(p == 1 || p == 2 || p == 4 || p == 8 || p == 16);
    // Row r's start within its granule, as the device computes a pointer (64-bit, wrapping: 16
    // divides 2^64, so the low four bits are exact).
    const uint64_t base = rng();
    const auto shift_of = [&](uint64_t row) { return (base + row * uint64_t(stride) * uint64_t(elem)) & 15u; };
    const uint64_t first = rng() % (uint64_t(1) << 31);
    for (uint64_t k = 1; k <= 3; ++k) ASSERT_EQ(shift_of(first + k * p), shift_of(first)) << "row " << first + k * p;
    for (int q = 1; q < p; ++q) ASSERT_NE(shift_of(first + q), shift_of(first)) << "a shorter period: " << q;
  }
}

// A random view at the API's extremes: up to 2^62 elements over 1-5 dims (rows and row lengths
// past 2^31), dims laid out in a random memory order, sometimes stepped, padded, expanded or a
// slice of a huge buffer (a stride of 2^31..2^62); a stride past int64 replaced by its wrapped
// value (the product a faked merge would see) or a random one; size-1 dims of any stride.
TensorView random_extreme_view(std::mt19937_64* rng) {
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(*rng); };
  TensorView x;
  x.rank = static_cast<int>(uniform(1, 5));
  int budget = 62;  // log2 of the largest element count left
  for (int d = 0; d < x.rank; ++d) {
    const int bits = static_cast<int>(uniform(0, std::min(budget, 36)));
    x.sizes[d] = uniform(0, 4) == 0 || bits == 0 ? 1 : uniform(int64_t(1) << (bits - 1), (int64_t(1) << bits) - 1) + 1;
    budget -= bits;
  }
  std::vector<int> order(x.rank);
  for (int d = 0; d < x.rank; ++d) order[d] = d;
  std::shuffle(order.begin(), order.end(), *rng);  // order[0] outermost in memory
  __int128 next = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    const int d = order[i];
    const int64_t pick = uniform(0, 9);
    // Stepped, expanded, sliced or dense.
    __int128 stride = pick == 0 ? next * 2 : pick == 1 ? 0 : pick == 2 ? __int128(1) << uniform(31, 62) : next;
    if (stride > std::numeric_limits<int64_t>::max()) {
      const int64_t wrapped = static_cast<int64_t>(static_cast<uint64_t>(stride));
      stride = wrapped >= 0 && uniform(0, 1) == 0 ? wrapped : uniform(0, std::numeric_limits<int64_t>::max());
    }
    x.strides[d] = static_cast<int64_t>(stride);
    if (pick != 1) next = stride * x.sizes[d] + (uniform(0, 5) == 0 ? uniform(1, 1000) : 0);
  }
  const int64_t any[] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -1,
                         static_cast<int64_t>((*rng)())};
  for (int d = 0; d < x.rank; ++d)
    if (x.sizes[d] == 1 && uniform(0, 1) == 0) x.strides[d] = any[uniform(0, 3)];
  return x;
}

// plan_rowwise on views at the extremes: rows x cols is every element, and a row-major plan (the
// one the row kernels address as row * row_stride + col, int64) finds every sampled element
// where the view has it, however large the strides (no merge faked by an overflowing product).
TEST(PlanRowwiseRandom, ExtremeLayoutsAddressEverySampledElement) {
  std::mt19937_64 rng(4242);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int major = 0, long_rows = 0, many_rows = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const TensorView x = random_extreme_view(&rng);
    const int64_t dim = uniform(-x.rank, x.rank - 1);
    const int d = static_cast<int>(dim < 0 ? dim + x.rank : dim);
    SCOPED_TRACE(describe(x, ReduceDims::of({dim})));
    const RowwisePlan p = rowwise_ok(x, dim);
    __int128 rows = 1;
    for (int i = 0; i < x.rank; ++i)
      if (i != d) rows *= x.sizes[i];
    ASSERT_EQ(p.rows, static_cast<int64_t>(rows));
    ASSERT_EQ(p.cols, x.sizes[d]);
    if (!p.row_major || p.rows == 0 || p.cols == 0) continue;
    ++major;
    long_rows += p.cols > (int64_t(1) << 31);
    many_rows += p.rows > (int64_t(1) << 31);
    for (int sample = 0; sample < 8; ++sample) {
      const int64_t r = sample == 0 ? 0 : sample == 1 ? p.rows - 1 : uniform(0, p.rows - 1);
      const int64_t c = sample < 2 ? p.cols - 1 : uniform(0, p.cols - 1);
      // Element (r, c): r in the row-major order of the other dims, c along dim.
      __int128 offset = __int128(c) * (p.cols > 1 ? x.strides[d] : 0);
      int64_t rest = r;
      for (int i = x.rank - 1; i >= 0; --i) {
        if (i == d) continue;
        offset += __int128(rest % x.sizes[i]) * (x.sizes[i] > 1 ? x.strides[i] : 0);
        rest /= x.sizes[i];
      }
      ASSERT_TRUE(offset == __int128(r) * p.row_stride + c) << "element (" << r << ", " << c << ") is elsewhere";
    }
  }
  // The generator must reach long rows, many rows and row-major plans, or this test proves little.
  EXPECT_GT(major, 2000);
  EXPECT_GT(long_rows, 50);
  EXPECT_GT(many_rows, 50);
}

// The brute-force truth for row_major: some row_stride s puts element (r, c) at r * s + c.
TEST(PlanRowwiseBruteForce, RowMajorExactlyWhenAffine) {
  std::mt19937 rng(99);
  int major = 0, not_major = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const TensorView x = random_view(&rng);
    const int dim = std::uniform_int_distribution<int>(-x.rank, x.rank - 1)(rng);
    const int d = dim < 0 ? dim + x.rank : dim;
    SCOPED_TRACE(describe(x, ReduceDims::of({dim})));
    const RowwisePlan p = rowwise_ok(x, dim);

    std::vector<int64_t> other_sizes;
    for (int i = 0; i < x.rank; ++i) {
      if (i != d) other_sizes.push_back(x.sizes[i]);
    }
    int64_t rows = 1;
    for (int64_t s : other_sizes) rows *= s;
    ASSERT_EQ(p.rows, rows);
    ASSERT_EQ(p.cols, x.sizes[d]);
    if (p.rows == 0 || p.cols == 0) {
      ASSERT_TRUE(p.row_major);
      continue;
    }

    // offsets[r][c], rows in row-major order of the other dims.
    std::vector<std::vector<int64_t>> offsets;
    for_each_index(other_sizes, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> idx(x.rank);
      for (int i = 0, j = 0; i < x.rank; ++i) {
        if (i != d) idx[i] = o[j++];
      }
      std::vector<int64_t> row;
      for (int64_t c = 0; c < p.cols; ++c) {
        idx[d] = c;
        row.push_back(offset_of(x, idx));
      }
      offsets.push_back(row);
    });
    const int64_t s = rows > 1 ? offsets[1][0] : p.cols;
    bool affine = true;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < p.cols; ++c) affine = affine && offsets[r][c] == r * s + c;
    ASSERT_EQ(p.row_major, affine);
    if (affine) {
      ASSERT_EQ(p.row_stride, s);
      ++major;
    } else {
      ASSERT_EQ(p.row_stride, p.cols);
      ++not_major;
    }
  }
  EXPECT_GT(major, 200);
  EXPECT_GT(not_major, 200);
}

}  // namespace
}  // namespace reducekit
