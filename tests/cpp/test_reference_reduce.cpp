// SPDX-License-Identifier: Apache-2.0
// Tests of the reductions in the float64 oracle: closed forms, torch's edge-case rules (empty sets,
// NaN, ties, correction), equality with hand-written loops, and gradients by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "reference/reference.hpp"
#include "reference_test_util.hpp"

namespace ref = reducekit::reference;

namespace {

using namespace reducekit::reference_test;

TEST(ReferenceSum, CompensatedSumRecoversLostBits) {
  ref::CompensatedSum s;
  for (double v : {1.0, 1e100, 1.0, -1e100}) s.add(v);
  EXPECT_EQ(s.value(), 2.0);  // a plain sum gives 0
  ref::CompensatedSum inf_sum;
  inf_sum.add(kInf);
  inf_sum.add(1.0);
  EXPECT_EQ(inf_sum.value(), kInf);
  ref::CompensatedSum nan_sum;
  nan_sum.add(kInf);
  nan_sum.add(-kInf);
  EXPECT_TRUE(std::isnan(nan_sum.value()));
}

TEST(ReferenceReduce, ClosedFormsOnSmallMatrix) {
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};  // [[1, 2, 3], [4, 5, 6]]
  const ref::Shape shape = {2, 3};
  std::vector<double> y(3);
  ASSERT_TRUE(ref::sum(x.data(), shape, {1}, y.data()));
  EXPECT_EQ(y[0], 6);
  EXPECT_EQ(y[1], 15);
  ASSERT_TRUE(ref::sum(x.data(), shape, {0}, y.data()));
  EXPECT_EQ(y[0], 5);
  EXPECT_EQ(y[1], 7);
  EXPECT_EQ(y[2], 9);
  ASSERT_TRUE(ref::sum(x.data(), shape, ref::all_dims(2), y.data()));
  EXPECT_EQ(y[0], 21);
  ASSERT_TRUE(ref::mean(x.data(), shape, {-1}, y.data()));
  EXPECT_EQ(y[0], 2);
  EXPECT_EQ(y[1], 5);
  ASSERT_TRUE(ref::prod(x.data(), shape, {1}, y.data()));
  EXPECT_EQ(y[0], 6);
  EXPECT_EQ(y[1], 120);
  ASSERT_TRUE(ref::amax(x.data(), shape, {0}, y.data()));
  EXPECT_EQ(y[0], 4);
  EXPECT_EQ(y[2], 6);
  ASSERT_TRUE(ref::amin(x.data(), shape, {1}, y.data()));
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(y[1], 4);
  std::vector<int64_t> idx(3);
  ASSERT_TRUE(ref::argmax(x.data(), shape, ref::all_dims(2), idx.data()));
  EXPECT_EQ(idx[0], 5);  // flat index, as torch.argmax(x)
}

TEST(ReferenceReduce, DimsZeroAndTwoMatchManualLoops) {
  const int64_t a = 3, b = 4, c = 5;
  const std::vector<double> x = randn(a * b * c, 11);
  const ref::Shape shape = {a, b, c};
  std::vector<double> s(b), mx(b), v(b), m(b), lse(b);
  std::vector<int64_t> am(b);
  // Dims in any order mean the same set.
  ASSERT_TRUE(ref::sum(x.data(), shape, {2, 0}, s.data()));
  ASSERT_TRUE(ref::amax(x.data(), shape, {0, 2}, mx.data()));
  ASSERT_TRUE(ref::argmax(x.data(), shape, {0, -1}, am.data()));
  ASSERT_TRUE(ref::var_mean(x.data(), shape, {0, 2}, 1.0, v.data(), m.data()));
  ASSERT_TRUE(ref::logsumexp(x.data(), shape, {0, 2}, lse.data()));
  for (int64_t j = 0; j < b; ++j) {
    double sum = 0, best = -kInf, exp_sum = 0;
    int64_t best_k = -1;
    for (int64_t i = 0; i < a; ++i)
      for (int64_t k = 0; k < c; ++k) {
        const double e = x[(i * b + j) * c + k];
        sum += e;
        exp_sum += std::exp(e);
        if (e > best) best = e, best_k = i * c + k;  // row-major index over (dim 0, dim 2)
      }
    const double mean = sum / (a * c);
    double m2 = 0;
    for (int64_t i = 0; i < a; ++i)
      for (int64_t k = 0; k < c; ++k) m2 += std::pow(x[(i * b + j) * c + k] - mean, 2);
    EXPECT_NEAR(s[j], sum, 1e-13);
    EXPECT_EQ(mx[j], best);
    EXPECT_EQ(am[j], best_k);
    EXPECT_NEAR(m[j], mean, 1e-14);
    EXPECT_NEAR(v[j], m2 / (a * c - 1), 1e-13);
    EXPECT_NEAR(lse[j], std::log(exp_sum), 1e-13);
  }
}

TEST(ReferenceReduce, LayoutOffsetsFollowRowMajorOrder) {
  ref::ReductionLayout layout;
  ASSERT_TRUE(ref::make_reduction_layout({2, 3, 4}, {1}, &layout));
  EXPECT_EQ(layout.output_offsets, (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(layout.reduced_offsets, (std::vector<int64_t>{0, 4, 8}));
}

TEST(ReferenceReduce, ReducedShapeAndKeepdim) {
  ref::Shape out;
  ASSERT_TRUE(ref::reduced_shape({2, 3, 4}, {1}, false, &out));
  EXPECT_EQ(out, (ref::Shape{2, 4}));
  ASSERT_TRUE(ref::reduced_shape({2, 3, 4}, {1}, true, &out));
  EXPECT_EQ(out, (ref::Shape{2, 1, 4}));
  ASSERT_TRUE(ref::reduced_shape({2, 3, 4}, {-1, 0}, true, &out));
  EXPECT_EQ(out, (ref::Shape{1, 3, 1}));
  ASSERT_TRUE(ref::reduced_shape({2, 3, 4}, ref::all_dims(3), false, &out));
  EXPECT_EQ(out, ref::Shape{});
  ASSERT_TRUE(ref::reduced_shape({2, 3}, {}, false, &out));
  EXPECT_EQ(out, (ref::Shape{2, 3}));
  ASSERT_TRUE(ref::reduced_shape({}, {0}, true, &out));  // a scalar names dim 0, as torch
  EXPECT_EQ(out, ref::Shape{});
}

TEST(ReferenceReduce, RejectsBadDimsAndShapes) {
  const std::vector<double> x(24, 1.0);
  std::vector<double> y(24);
  EXPECT_FALSE(ref::sum(x.data(), {2, 3, 4}, {3}, y.data()));
  EXPECT_FALSE(ref::sum(x.data(), {2, 3, 4}, {-4}, y.data()));
  EXPECT_FALSE(ref::sum(x.data(), {2, 3, 4}, {1, 1}, y.data()));
  EXPECT_FALSE(ref::sum(x.data(), {2, 3, 4}, {2, -1}, y.data()));
  EXPECT_FALSE(ref::sum(x.data(), {2, -3}, {0}, y.data()));
  EXPECT_FALSE(ref::sum(x.data(), {}, {1}, y.data()));
  EXPECT_FALSE(ref::sum(x.data(), ref::Shape(9, 1), {0}, y.data()));
  EXPECT_TRUE(ref::sum(x.data(), ref::Shape(8, 1), {0, 7}, y.data()));
  EXPECT_EQ(y[0], 1.0);
}

TEST(ReferenceReduce, EmptyDimsReduceNothing) {
  const std::vector<double> x = {1.5, -2.0, 3.0};
  std::vector<double> y(3);
  ASSERT_TRUE(ref::sum(x.data(), {3}, {}, y.data()));
  EXPECT_EQ(y, x);
  ASSERT_TRUE(ref::var(x.data(), {3}, {}, 0.0, y.data()));
  EXPECT_EQ(y, (std::vector<double>{0, 0, 0}));
  ASSERT_TRUE(ref::var(x.data(), {3}, {}, 1.0, y.data()));
  for (double v : y) EXPECT_TRUE(std::isnan(v));  // one element, correction 1: 0 / 0
}

TEST(ReferenceReduce, EmptyReducedSets) {
  const std::vector<double> none;
  const ref::Shape shape = {3, 0};
  std::vector<double> y(3, 42.0), y2(3, 42.0);
  std::vector<int64_t> idx(3, 42);
  ASSERT_TRUE(ref::sum(none.data(), shape, {1}, y.data()));
  EXPECT_EQ(y, (std::vector<double>{0, 0, 0}));
  ASSERT_TRUE(ref::prod(none.data(), shape, {1}, y.data()));
  EXPECT_EQ(y, (std::vector<double>{1, 1, 1}));
  ASSERT_TRUE(ref::mean(none.data(), shape, {1}, y.data()));
  EXPECT_TRUE(std::isnan(y[0]));
  ASSERT_TRUE(ref::logsumexp(none.data(), shape, {1}, y.data()));
  EXPECT_EQ(y[2], -kInf);
  ASSERT_TRUE(ref::var_mean(none.data(), shape, {1}, 0.0, y.data(), y2.data()));
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_TRUE(std::isnan(y2[1]));
  // torch fills var of an empty input with NaN whatever the correction (M2 / (0 - (-1)) would be 0).
  ASSERT_TRUE(ref::var(none.data(), shape, {1}, -1.0, y.data()));
  EXPECT_TRUE(std::isnan(y[0]));
  // Undefined on an empty set: refused, and nothing written.
  y.assign(3, 42.0);
  EXPECT_FALSE(ref::amax(none.data(), shape, {1}, y.data()));
  EXPECT_FALSE(ref::amin(none.data(), shape, {0, 1}, y.data()));
  EXPECT_FALSE(ref::argmax(none.data(), shape, {1}, idx.data()));
  EXPECT_FALSE(ref::argmin(none.data(), shape, {1}, idx.data()));
  EXPECT_EQ(y[0], 42.0);
  EXPECT_EQ(idx[0], 42);
  // Reducing a non-empty dim of an empty tensor is fine: there are no outputs.
  EXPECT_TRUE(ref::amax(none.data(), {0, 3}, {1}, y.data()));
}

TEST(ReferenceReduce, ArgmaxTiesAndNaN) {
  std::vector<int64_t> idx(1);
  std::vector<double> y(1);
  const std::vector<double> ties = {1, 3, 3, 2, 1};
  ASSERT_TRUE(ref::argmax(ties.data(), {5}, {0}, idx.data()));
  EXPECT_EQ(idx[0], 1);
  ASSERT_TRUE(ref::argmin(ties.data(), {5}, {0}, idx.data()));
  EXPECT_EQ(idx[0], 0);
  const std::vector<double> with_nan = {1, kInf, kNaN, 5, kNaN};
  ASSERT_TRUE(ref::argmax(with_nan.data(), {5}, {0}, idx.data()));
  EXPECT_EQ(idx[0], 2);
  ASSERT_TRUE(ref::argmin(with_nan.data(), {5}, {0}, idx.data()));
  EXPECT_EQ(idx[0], 2);
  ASSERT_TRUE(ref::amax(with_nan.data(), {5}, {0}, y.data()));
  EXPECT_TRUE(std::isnan(y[0]));
  ASSERT_TRUE(ref::amin(with_nan.data(), {5}, {0}, y.data()));
  EXPECT_TRUE(std::isnan(y[0]));
  const std::vector<double> neg_inf = {-kInf, -kInf};
  ASSERT_TRUE(ref::argmax(neg_inf.data(), {2}, {0}, idx.data()));
  EXPECT_EQ(idx[0], 0);
  ASSERT_TRUE(ref::amax(neg_inf.data(), {2}, {0}, y.data()));
  EXPECT_EQ(y[0], -kInf);
}

TEST(ReferenceReduce, NaNPropagatesThroughSums) {
  const std::vector<double> x = {1, kNaN, 2, 3, kInf, -kInf};
  std::vector<double> y(2);
  ASSERT_TRUE(ref::sum(x.data(), {2, 3}, {1}, y.data()));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));  // inf + -inf
  ASSERT_TRUE(ref::prod(x.data(), {2, 3}, {1}, y.data()));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], -kInf);
}

TEST(ReferenceReduce, VarianceCorrection) {
  const std::vector<double> x = {1, 2, 3, 4};  // mean 2.5, M2 = 5
  std::vector<double> v(1), s(1), m(1);
  auto var_with = [&](double correction) {
    EXPECT_TRUE(ref::var(x.data(), {4}, {0}, correction, v.data()));
    return v[0];
  };
  EXPECT_DOUBLE_EQ(var_with(1.0), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(var_with(0.0), 1.25);
  EXPECT_DOUBLE_EQ(var_with(0.5), 5.0 / 3.5);
  EXPECT_EQ(var_with(4.0), kInf);  // n - correction == 0
  EXPECT_EQ(var_with(6.0), kInf);  // negative: the divisor clamps at 0
  ASSERT_TRUE(ref::std_mean(x.data(), {4}, {0}, 1.0, s.data(), m.data()));
  EXPECT_DOUBLE_EQ(s[0], std::sqrt(5.0 / 3.0));
  EXPECT_EQ(m[0], 2.5);
  const std::vector<double> constant = {7, 7, 7};
  ASSERT_TRUE(ref::var(constant.data(), {3}, {0}, 1.0, v.data()));
  EXPECT_EQ(v[0], 0.0);
  ASSERT_TRUE(ref::var(constant.data(), {3}, {0}, 3.0, v.data()));
  EXPECT_TRUE(std::isnan(v[0]));  // 0 / 0
  ASSERT_TRUE(ref::std(constant.data(), {3}, {0}, 1.0, v.data()));
  EXPECT_EQ(v[0], 0.0);
}

TEST(ReferenceReduce, TwoPassVarianceSurvivesLargeOffset) {
  // E[x^2] - E[x]^2 would lose every digit here; two passes are exact.
  const std::vector<double> x = {1e9 + 1, 1e9 + 2, 1e9 + 3, 1e9 + 4};
  std::vector<double> v(1);
  ASSERT_TRUE(ref::var(x.data(), {4}, {0}, 1.0, v.data()));
  EXPECT_DOUBLE_EQ(v[0], 5.0 / 3.0);
}

TEST(ReferenceReduce, LogsumexpRules) {
  std::vector<double> y(1);
  auto lse = [&](std::vector<double> x) {
    EXPECT_TRUE(ref::logsumexp(x.data(), {static_cast<int64_t>(x.size())}, {0}, y.data()));
    return y[0];
  };
  EXPECT_NEAR(lse({0.0, std::log(2.0)}), std::log(3.0), 1e-15);
  EXPECT_NEAR(lse({1000.0, 1000.0}), 1000.0 + std::log(2.0), 1e-12);
  EXPECT_EQ(lse({-kInf, -kInf}), -kInf);
  EXPECT_EQ(lse({kInf, 1.0}), kInf);
  EXPECT_EQ(lse({kInf, -kInf}), kInf);
  EXPECT_TRUE(std::isnan(lse({kNaN, 1.0})));
  EXPECT_TRUE(std::isnan(lse({kInf, kNaN})));
  EXPECT_NEAR(lse({-kInf, 2.0}), 2.0, 1e-15);
}

TEST(ReferenceReduce, LongRowsAreExactAndFast) {
  const int64_t n = int64_t{1} << 20;
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(i);
  std::vector<double> s(1), v(1);
  ASSERT_TRUE(ref::sum(x.data(), {1, n}, {1}, s.data()));
  EXPECT_EQ(s[0], static_cast<double>(n) * (n - 1) / 2);
  ASSERT_TRUE(ref::var(x.data(), {n}, {0}, 1.0, v.data()));
  EXPECT_NEAR(v[0], static_cast<double>(n) * (n + 1) / 12, 1e-9 * v[0]);
  // 0.1 is inexact in binary; the compensated sum still lands within an ulp or two of n * 0.1.
  std::vector<double> tenths(n, 0.1);
  ASSERT_TRUE(ref::sum(tenths.data(), {n}, {0}, s.data()));
  EXPECT_NEAR(s[0], 0.1 * n, 4 * std::numeric_limits<double>::epsilon() * 0.1 * n);
}

// Checks a reduction's backward against finite differences over shape {3, 4, 5}, dims {0, 2}.
using Forward = std::function<bool(const double*, double*)>;
using Backward = std::function<bool(const double*, const double*, const double*, double*)>;

void check_reduction_gradient(const Forward& forward, const Backward& backward,
                              std::vector<double> x, double tol = 1e-7) {
  const size_t outputs = 4;
  const std::vector<double> w = randn(outputs, 21);
  std::vector<double> y(outputs), dx(x.size());
  ASSERT_TRUE(forward(x.data(), y.data()));
  ASSERT_TRUE(backward(x.data(), y.data(), w.data(), dx.data()));
  const auto numeric = numeric_gradient(
      [&](std::vector<double> xs) {
        std::vector<double> ys(outputs);
        forward(xs.data(), ys.data());
        return ys;
      },
      x, w);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dx[i], numeric[i], tol) << i;
}

const ref::Shape kGradShape = {3, 4, 5};
const ref::Dims kGradDims = {0, 2};

TEST(ReferenceReduceBackward, SumMeanLogsumexp) {
  const auto x = randn(60, 31);
  check_reduction_gradient(
      [](const double* x, double* y) { return ref::sum(x, kGradShape, kGradDims, y); },
      [](const double*, const double*, const double* dy, double* dx) {
        return ref::sum_backward(dy, kGradShape, kGradDims, dx);
      },
      x);
  check_reduction_gradient(
      [](const double* x, double* y) { return ref::mean(x, kGradShape, kGradDims, y); },
      [](const double*, const double*, const double* dy, double* dx) {
        return ref::mean_backward(dy, kGradShape, kGradDims, dx);
      },
      x);
  check_reduction_gradient(
      [](const double* x, double* y) { return ref::logsumexp(x, kGradShape, kGradDims, y); },
      [](const double* x, const double* y, const double* dy, double* dx) {
        return ref::logsumexp_backward(x, y, dy, kGradShape, kGradDims, dx);
      },
      x);
}

TEST(ReferenceReduceBackward, VarStdWithCorrections) {
  const auto x = randn(60, 32);
  for (double correction : {0.0, 1.0, 2.5}) {
    SCOPED_TRACE(correction);
    check_reduction_gradient(
        [=](const double* x, double* y) {
          return ref::var(x, kGradShape, kGradDims, correction, y);
        },
        [=](const double* x, const double*, const double* dy, double* dx) {
          return ref::var_backward(x, dy, kGradShape, kGradDims, correction, dx);
        },
        x);
    check_reduction_gradient(
        [=](const double* x, double* y) {
          return ref::std(x, kGradShape, kGradDims, correction, y);
        },
        [=](const double* x, const double* y, const double* dy, double* dx) {
          return ref::std_backward(x, y, dy, kGradShape, kGradDims, correction, dx);
        },
        x);
  }
}

TEST(ReferenceReduceBackward, ProdAndAmaxAwayFromTies) {
  // Values near +-1 keep the 15-term products well scaled.
  std::vector<double> x = randn(60, 33, 0.3);
  for (double& v : x) v += v >= 0 ? 1.0 : -1.0;
  check_reduction_gradient(
      [](const double* x, double* y) { return ref::prod(x, kGradShape, kGradDims, y); },
      [](const double* x, const double*, const double* dy, double* dx) {
        return ref::prod_backward(x, dy, kGradShape, kGradDims, dx);
      },
      x, 1e-6);
  check_reduction_gradient(
      [](const double* x, double* y) { return ref::amax(x, kGradShape, kGradDims, y); },
      [](const double* x, const double* y, const double* dy, double* dx) {
        return ref::amax_backward(x, y, dy, kGradShape, kGradDims, dx);
      },
      x);
  check_reduction_gradient(
      [](const double* x, double* y) { return ref::amin(x, kGradShape, kGradDims, y); },
      [](const double* x, const double* y, const double* dy, double* dx) {
        return ref::amin_backward(x, y, dy, kGradShape, kGradDims, dx);
      },
      x);
}

TEST(ReferenceReduceBackward, ProdWithZeros) {
  // Row 0 has one zero: only it gets a gradient (the product of the others). Row 1 has two zeros:
  // every partial product contains a zero.
  const std::vector<double> x = {2, 0, 3, 0, 0, 3};
  const std::vector<double> dy = {10, 10};
  std::vector<double> dx(6);
  ASSERT_TRUE(ref::prod_backward(x.data(), dy.data(), {2, 3}, {1}, dx.data()));
  EXPECT_EQ(dx, (std::vector<double>{0, 60, 0, 0, 0, 0}));
  const std::vector<double> no_zero = {2, -4, 0.5};
  ASSERT_TRUE(ref::prod_backward(no_zero.data(), dy.data(), {3}, {0}, dx.data()));
  EXPECT_EQ(dx[0], -20);
  EXPECT_EQ(dx[1], 10);
  EXPECT_EQ(dx[2], -80);
}

TEST(ReferenceReduceBackward, AmaxSplitsAmongTiesAndNaNPoisons) {
  const std::vector<double> x = {1, 3, 3, 2, kNaN, 5};
  std::vector<double> y(2), dx(6);
  const std::vector<double> dy = {1, 4};
  ASSERT_TRUE(ref::amax(x.data(), {2, 3}, {1}, y.data()));
  ASSERT_TRUE(ref::amax_backward(x.data(), y.data(), dy.data(), {2, 3}, {1}, dx.data()));
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[1], 0.5);
  EXPECT_EQ(dx[2], 0.5);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(dx[i])) << i;
  const std::vector<double> low = {4, 1, 1};
  ASSERT_TRUE(ref::amin(low.data(), {3}, {0}, y.data()));
  ASSERT_TRUE(ref::amin_backward(low.data(), y.data(), dy.data(), {3}, {0}, dx.data()));
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[1], 0.5);
  EXPECT_EQ(dx[2], 0.5);
}

TEST(ReferenceReduceBackward, StdOfConstantSetHasZeroGradient) {
  const std::vector<double> x = {2, 2, 2, 1, 2, 3};
  std::vector<double> y(2), dx(6);
  const std::vector<double> dy = {1, 1};
  ASSERT_TRUE(ref::std(x.data(), {2, 3}, {1}, 1.0, y.data()));
  ASSERT_TRUE(ref::std_backward(x.data(), y.data(), dy.data(), {2, 3}, {1}, 1.0, dx.data()));
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[2], 0.0);
  // Row 1: std = 1, d std / dx_i = (x_i - mean) / ((n - 1) * std) = (x_i - 2) / 2.
  EXPECT_DOUBLE_EQ(dx[3], -0.5);
  EXPECT_EQ(dx[4], 0.0);
  EXPECT_DOUBLE_EQ(dx[5], 0.5);
}

TEST(ReferenceReduceBackward, VarWithNoDegreesOfFreedom) {
  // n - correction == 0: 2 / 0 * dy * (x - mean), i.e. +-inf, and NaN where x == mean.
  const std::vector<double> x = {1, 2, 3};
  const std::vector<double> dy = {1};
  std::vector<double> dx(3);
  ASSERT_TRUE(ref::var_backward(x.data(), dy.data(), {3}, {0}, 3.0, dx.data()));
  EXPECT_EQ(dx[0], -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(dx[1]));
  EXPECT_EQ(dx[2], std::numeric_limits<double>::infinity());
}

}  // namespace
