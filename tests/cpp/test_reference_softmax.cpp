// SPDX-License-Identifier: Apache-2.0
// Tests of the softmax family in the float64 oracle: closed forms, invariants, torch's NaN rules
// and gradients against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "reference/reference.hpp"
#include "reference_test_util.hpp"

namespace ref = reducekit::reference;

namespace {

using namespace reducekit::reference_test;

TEST(ReferenceSoftmax, ClosedFormTwoValues) {
  const std::vector<double> x = {0.0, std::log(2.0)};
  std::vector<double> y(2), ly(2);
  ref::softmax_rows(x.data(), y.data(), 1, 2);
  ref::log_softmax_rows(x.data(), ly.data(), 1, 2);
  EXPECT_NEAR(y[0], 1.0 / 3.0, 1e-15);
  EXPECT_NEAR(y[1], 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(ly[0], -std::log(3.0), 1e-15);
  EXPECT_NEAR(ly[1], std::log(2.0 / 3.0), 1e-15);
}

TEST(ReferenceSoftmax, LargeMagnitudesDoNotOverflow) {
  // Without the max shift exp(1e4) would be inf and the row NaN.
  const std::vector<double> x = {1e4, 1e4, 1e4 - std::log(2.0)};
  std::vector<double> y(3);
  ref::softmax_rows(x.data(), y.data(), 1, 3);
  EXPECT_NEAR(y[0], 0.4, 1e-13);
  EXPECT_NEAR(y[1], 0.4, 1e-13);
  EXPECT_NEAR(y[2], 0.2, 1e-13);
}

TEST(ReferenceSoftmax, RowsSumToOneAndShiftInvariant) {
  const int64_t rows = 5, cols = 37;
  std::vector<double> x = randn(rows * cols, 1, 3.0);
  std::vector<double> shifted(x), y(x.size()), ys(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) shifted[r * cols + c] += 100.0 * (r + 1);
  ref::softmax_rows(x.data(), y.data(), rows, cols);
  ref::softmax_rows(shifted.data(), ys.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += y[r * cols + c];
    EXPECT_NEAR(s, 1.0, 1e-14);
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], ys[i], 1e-14);
}

TEST(ReferenceSoftmax, LogSoftmaxIsLogOfSoftmax) {
  const int64_t rows = 3, cols = 50;
  std::vector<double> x = randn(rows * cols, 2, 2.0), y(x.size()), ly(x.size());
  ref::softmax_rows(x.data(), y.data(), rows, cols);
  ref::log_softmax_rows(x.data(), ly.data(), rows, cols);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(ly[i], std::log(y[i]), 1e-13);
}

TEST(ReferenceSoftmax, NegInfPaddingAndNaNRules) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Row 0: -inf padding gets probability 0. Row 1: all -inf is NaN (torch).
  // Row 2: +inf gives NaN everywhere (inf - inf). Row 3: one NaN poisons the row.
  const std::vector<double> x = {0.0, -kInf, 0.0,  -kInf, -kInf, -kInf,
                                 1.0, kInf,  -kInf, 1.0,  nan,   2.0};
  std::vector<double> y(12), ly(12);
  ref::softmax_rows(x.data(), y.data(), 4, 3);
  ref::log_softmax_rows(x.data(), ly.data(), 4, 3);
  EXPECT_DOUBLE_EQ(y[0], 0.5);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_DOUBLE_EQ(y[2], 0.5);
  EXPECT_DOUBLE_EQ(ly[0], -std::log(2.0));
  EXPECT_EQ(ly[1], -kInf);
  for (int i = 3; i < 12; ++i) {
    EXPECT_TRUE(std::isnan(y[i])) << i;
    EXPECT_TRUE(std::isnan(ly[i])) << i;
  }
}

TEST(ReferenceSoftmax, SingleColumnIsOne) {
  const std::vector<double> x = {-3.0, 7.5};
  std::vector<double> y(2), ly(2);
  ref::softmax_rows(x.data(), y.data(), 2, 1);
  ref::log_softmax_rows(x.data(), ly.data(), 2, 1);
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], 1.0);
  EXPECT_EQ(ly[0], 0.0);
  EXPECT_EQ(ly[1], 0.0);
}

// Checks the backward of f against central differences of the objective sum(w * f(x)).
template <typename Forward, typename Backward>
void check_softmax_gradient(Forward forward, Backward backward, int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<double> x = randn(n, 3), w = randn(n, 4), y(n), dx(n);
  forward(x.data(), y.data(), rows, cols);
  backward(y.data(), w.data(), dx.data(), rows, cols);
  const double h = 1e-6;
  std::vector<double> yp(n), ym(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> xp(x), xm(x);
    xp[i] += h;
    xm[i] -= h;
    forward(xp.data(), yp.data(), rows, cols);
    forward(xm.data(), ym.data(), rows, cols);
    double numeric = 0;
    for (size_t j = 0; j < n; ++j) numeric += w[j] * (yp[j] - ym[j]);
    numeric /= 2 * h;
    EXPECT_NEAR(dx[i], numeric, 1e-8) << i;
  }
}

TEST(ReferenceSoftmax, BackwardMatchesFiniteDifferences) {
  check_softmax_gradient(ref::softmax_rows, ref::softmax_backward_rows, 3, 7);
}

TEST(ReferenceSoftmax, LogBackwardMatchesFiniteDifferences) {
  check_softmax_gradient(ref::log_softmax_rows, ref::log_softmax_backward_rows, 3, 7);
}

TEST(ReferenceSoftmax, LongRowIsFastAndNormalized) {
  const int64_t cols = int64_t{1} << 20;
  std::vector<double> x = randn(cols, 5, 4.0), y(cols), dx(cols);
  ref::softmax_rows(x.data(), y.data(), 1, cols);
  double s = 0;
  for (double v : y) s += v;
  EXPECT_NEAR(s, 1.0, 1e-12);
  // With dy = 1 the softmax gradient is y * (1 - 1) = 0.
  std::vector<double> ones(cols, 1.0);
  ref::softmax_backward_rows(y.data(), ones.data(), dx.data(), 1, cols);
  for (int64_t i = 0; i < cols; i += 4099) EXPECT_NEAR(dx[i], 0.0, 1e-17);
}

TEST(ReferenceSoftmax, AnyDimMatchesTransposedRows) {
  // Softmax over dim 1 of [2, 5, 3]: move dim 1 last by hand, use the rows version, compare.
  const int64_t a = 2, n = 5, c = 3;
  const std::vector<double> x = randn(a * n * c, 6, 2.0), w = randn(a * n * c, 7);
  std::vector<double> y(x.size()), ly(x.size()), dx(x.size()), ldx(x.size());
  ASSERT_TRUE(ref::softmax_dim(x.data(), y.data(), {a, n, c}, 1));
  ASSERT_TRUE(ref::log_softmax_dim(x.data(), ly.data(), {a, n, c}, -2));
  ASSERT_TRUE(ref::softmax_backward_dim(y.data(), w.data(), dx.data(), {a, n, c}, 1));
  ASSERT_TRUE(ref::log_softmax_backward_dim(ly.data(), w.data(), ldx.data(), {a, n, c}, 1));
  auto at = [&](int64_t i, int64_t k, int64_t j) { return (i * n + k) * c + j; };
  std::vector<double> xt(x.size()), wt(x.size()), yt(x.size()), lyt(x.size()), dxt(x.size()),
      ldxt(x.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < n; ++k) {
        xt[(i * c + j) * n + k] = x[at(i, k, j)];
        wt[(i * c + j) * n + k] = w[at(i, k, j)];
      }
  ref::softmax_rows(xt.data(), yt.data(), a * c, n);
  ref::log_softmax_rows(xt.data(), lyt.data(), a * c, n);
  ref::softmax_backward_rows(yt.data(), wt.data(), dxt.data(), a * c, n);
  ref::log_softmax_backward_rows(lyt.data(), wt.data(), ldxt.data(), a * c, n);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < n; ++k) {
        const int64_t t = (i * c + j) * n + k;
        EXPECT_EQ(y[at(i, k, j)], yt[t]);
        EXPECT_EQ(ly[at(i, k, j)], lyt[t]);
        EXPECT_EQ(dx[at(i, k, j)], dxt[t]);
        EXPECT_EQ(ldx[at(i, k, j)], ldxt[t]);
      }
  // The rows are really over dim 1: each (i, j) column of y sums to one.
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += y[at(1, k, 2)];
  EXPECT_NEAR(s, 1.0, 1e-15);
}

TEST(ReferenceSoftmax, AnyDimRejectsBadDims) {
  std::vector<double> x(6, 0.0), y(6);
  EXPECT_FALSE(ref::softmax_dim(x.data(), y.data(), {2, 3}, 2));
  EXPECT_FALSE(ref::log_softmax_dim(x.data(), y.data(), {2, 3}, -3));
  EXPECT_FALSE(ref::softmax_dim(x.data(), y.data(), {2, -3}, 0));
  ASSERT_TRUE(ref::softmax_dim(x.data(), y.data(), {}, 0));  // a scalar: softmax is 1
  EXPECT_EQ(y[0], 1.0);
}

}  // namespace
