// SPDX-License-Identifier: Apache-2.0
// Tests of layer_norm, rms_norm and batch_norm in the float64 oracle: closed forms, normalization
// invariants, running-stat updates and gradients against central finite differences.
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

TEST(ReferenceLayerNorm, ClosedForm) {
  const std::vector<double> x = {1, 2, 3, 4};  // mean 2.5, biased var 1.25
  const std::vector<double> w = {1, 2, 3, 4}, b = {0, 0, 1, -1};
  std::vector<double> y(4), mean(1), rstd(1);
  ref::layer_norm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), 1, 4,
                          0.75);
  EXPECT_EQ(mean[0], 2.5);
  EXPECT_DOUBLE_EQ(rstd[0], 1.0 / std::sqrt(2.0));  // 1 / sqrt(1.25 + 0.75)
  const double r = 1.0 / std::sqrt(2.0);
  EXPECT_DOUBLE_EQ(y[0], -1.5 * r);
  EXPECT_DOUBLE_EQ(y[1], -0.5 * r * 2);
  EXPECT_DOUBLE_EQ(y[2], 0.5 * r * 3 + 1);
  EXPECT_DOUBLE_EQ(y[3], 1.5 * r * 4 - 1);
}

TEST(ReferenceLayerNorm, OutputHasZeroMeanUnitVariance) {
  const int64_t rows = 4, cols = 1000;
  const auto x = randn(rows * cols, 41, 3.0, 50.0);
  std::vector<double> y(x.size()), mean(rows), rstd(rows);
  ref::layer_norm_forward(x.data(), nullptr, nullptr, y.data(), mean.data(), rstd.data(), rows,
                          cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, s2 = 0;
    for (int64_t j = 0; j < cols; ++j) s += y[r * cols + j];
    for (int64_t j = 0; j < cols; ++j) s2 += y[r * cols + j] * y[r * cols + j];
    EXPECT_NEAR(s / cols, 0.0, 1e-13);
    EXPECT_NEAR(s2 / cols, 1.0, 1e-13);
    EXPECT_NEAR(mean[r], 50.0, 0.5);
  }
}

TEST(ReferenceLayerNorm, ConstantRowGivesBias) {
  const std::vector<double> x = {5, 5, 5}, b = {1, 2, 3};
  std::vector<double> y(3), rstd(1);
  ref::layer_norm_forward(x.data(), nullptr, b.data(), y.data(), nullptr, rstd.data(), 1, 3, 1e-4);
  EXPECT_EQ(y, b);
  EXPECT_DOUBLE_EQ(rstd[0], 100.0);
}

TEST(ReferenceLayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 6;
  const double eps = 1e-5;
  const auto x = randn(rows * cols, 42), wt = randn(cols, 43, 0.5, 1.0), bs = randn(cols, 44);
  const auto obj = randn(rows * cols, 45);
  std::vector<double> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dw(cols), db(cols);
  ref::layer_norm_forward(x.data(), wt.data(), bs.data(), y.data(), mean.data(), rstd.data(), rows,
                          cols, eps);
  ref::layer_norm_backward(x.data(), obj.data(), mean.data(), rstd.data(), wt.data(), dx.data(),
                           dw.data(), db.data(), rows, cols);
  auto forward = [&](const std::vector<double>& xs, const std::vector<double>& ws,
                     const std::vector<double>& bsv) {
    std::vector<double> out(xs.size());
    ref::layer_norm_forward(xs.data(), ws.data(), bsv.data(), out.data(), nullptr, nullptr, rows,
                            cols, eps);
    return out;
  };
  expect_all_near(dx, numeric_gradient([&](auto p) { return forward(p, wt, bs); }, x, obj), 1e-7);
  expect_all_near(dw, numeric_gradient([&](auto p) { return forward(x, p, bs); }, wt, obj), 1e-7);
  expect_all_near(db, numeric_gradient([&](auto p) { return forward(x, wt, p); }, bs, obj), 1e-7);
  // Without weight the gradient is that of weight == 1; dweight alone can be asked for.
  std::vector<double> dx1(x.size()), dw1(cols);
  const std::vector<double> ones(cols, 1.0);
  ref::layer_norm_backward(x.data(), obj.data(), mean.data(), rstd.data(), nullptr, dx1.data(),
                           nullptr, nullptr, rows, cols);
  ref::layer_norm_backward(x.data(), obj.data(), mean.data(), rstd.data(), nullptr, nullptr,
                           dw1.data(), nullptr, rows, cols);
  expect_all_near(dx1, numeric_gradient([&](auto p) { return forward(p, ones, bs); }, x, obj),
                  1e-7);
  expect_all_near(dw1, dw, 1e-15);
}

TEST(ReferenceRmsNorm, ClosedForm) {
  const std::vector<double> x = {3, 4, -3, 4}, w = {2, 0.5};  // mean(x^2) = 12.5 on both rows
  std::vector<double> y(4), rstd(2);
  ref::rms_norm_forward(x.data(), w.data(), y.data(), rstd.data(), 2, 2, 0.0);
  const double r = 1.0 / std::sqrt(12.5);
  EXPECT_DOUBLE_EQ(rstd[0], r);
  EXPECT_DOUBLE_EQ(y[0], 3 * r * 2);
  EXPECT_DOUBLE_EQ(y[1], 4 * r * 0.5);
  EXPECT_DOUBLE_EQ(y[2], -3 * r * 2);
  ref::rms_norm_forward(x.data(), nullptr, y.data(), nullptr, 2, 2, 3.5);  // 1 / sqrt(16)
  EXPECT_DOUBLE_EQ(y[1], 1.0);
}

TEST(ReferenceRmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  const double eps = 1e-6;
  const auto x = randn(rows * cols, 46), wt = randn(cols, 47, 0.5, 1.0), obj = randn(rows * cols, 48);
  std::vector<double> y(x.size()), rstd(rows), dx(x.size()), dw(cols);
  ref::rms_norm_forward(x.data(), wt.data(), y.data(), rstd.data(), rows, cols, eps);
  ref::rms_norm_backward(x.data(), obj.data(), rstd.data(), wt.data(), dx.data(), dw.data(), rows,
                         cols);
  auto forward = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
    std::vector<double> out(xs.size());
    ref::rms_norm_forward(xs.data(), ws.data(), out.data(), nullptr, rows, cols, eps);
    return out;
  };
  expect_all_near(dx, numeric_gradient([&](auto p) { return forward(p, wt); }, x, obj), 1e-7);
  expect_all_near(dw, numeric_gradient([&](auto p) { return forward(x, p); }, wt, obj), 1e-7);
}

TEST(ReferenceRmsNorm, BiasIsAddedAfterTheScale) {
  const std::vector<double> x = {3, 4, -3, 4}, w = {2, 0.5}, b = {-1, 0.25};
  std::vector<double> y(4), plain(4), rstd(2);
  ref::rms_norm_forward(x.data(), w.data(), b.data(), y.data(), rstd.data(), 2, 2, 0.0);
  ref::rms_norm_forward(x.data(), w.data(), plain.data(), nullptr, 2, 2, 0.0);
  EXPECT_DOUBLE_EQ(rstd[0], 1.0 / std::sqrt(12.5));  // the bias leaves the statistic alone
  for (size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(y[i], plain[i] + b[i % 2]);
}

TEST(ReferenceRmsNorm, BackwardWithBiasMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  const double eps = 1e-6;
  const auto x = randn(rows * cols, 51), wt = randn(cols, 52, 0.5, 1.0), bs = randn(cols, 53),
             obj = randn(rows * cols, 54);
  std::vector<double> y(x.size()), rstd(rows), dx(x.size()), dw(cols), db(cols);
  ref::rms_norm_forward(x.data(), wt.data(), bs.data(), y.data(), rstd.data(), rows, cols, eps);
  ref::rms_norm_backward(x.data(), obj.data(), rstd.data(), wt.data(), dx.data(), dw.data(), db.data(), rows,
                         cols);
  auto forward = [&](const std::vector<double>& xs, const std::vector<double>& ws, const std::vector<double>& b) {
    std::vector<double> out(xs.size());
    ref::rms_norm_forward(xs.data(), ws.data(), b.data(), out.data(), nullptr, rows, cols, eps);
    return out;
  };
  expect_all_near(dx, numeric_gradient([&](auto p) { return forward(p, wt, bs); }, x, obj), 1e-7);
  expect_all_near(dw, numeric_gradient([&](auto p) { return forward(x, p, bs); }, wt, obj), 1e-7);
  expect_all_near(db, numeric_gradient([&](auto p) { return forward(x, wt, p); }, bs, obj), 1e-7);
  // Without the bias output the other gradients are the same.
  std::vector<double> dx0(x.size()), dw0(cols);
  ref::rms_norm_backward(x.data(), obj.data(), rstd.data(), wt.data(), dx0.data(), dw0.data(), rows, cols);
  expect_all_near(dx0, dx, 0.0);
  expect_all_near(dw0, dw, 0.0);
}

TEST(ReferenceNorm, LongRowsAreFast) {
  const int64_t cols = int64_t{1} << 20;
  const auto x = randn(cols, 49), dy = randn(cols, 50);
  std::vector<double> y(cols), dx(cols), mean(1), rstd(1);
  // eps = 0 makes y exactly unit-variance, so the orthogonality below is exact in real arithmetic.
  ref::layer_norm_forward(x.data(), nullptr, nullptr, y.data(), mean.data(), rstd.data(), 1, cols,
                          0.0);
  ref::layer_norm_backward(x.data(), dy.data(), mean.data(), rstd.data(), nullptr, dx.data(),
                           nullptr, nullptr, 1, cols);
  // The layer_norm gradient is orthogonal to the constant and to xhat directions.
  double s = 0, sx = 0;
  for (int64_t j = 0; j < cols; ++j) s += dx[j], sx += dx[j] * y[j];
  EXPECT_NEAR(s, 0.0, 1e-9);
  EXPECT_NEAR(sx, 0.0, 1e-9);
  ref::rms_norm_forward(x.data(), nullptr, y.data(), rstd.data(), 1, cols, 0.0);
  double s2 = 0;
  for (double v : y) s2 += v * v;
  EXPECT_NEAR(s2 / cols, 1.0, 1e-12);
}

TEST(ReferenceBatchNorm, TrainingClosedFormAndRunningStats) {
  // [n=2, c=2, hw=2]; channel 0 holds {1, 2, 3, 4}, channel 1 holds {10, 10, 10, 10}.
  const std::vector<double> x = {1, 2, 10, 10, 3, 4, 10, 10};
  const std::vector<double> w = {2, 1}, b = {0, 5};
  std::vector<double> y(8), mean(2), invstd(2);
  std::vector<double> running_mean = {0, 1}, running_var = {1, 1};
  ASSERT_TRUE(ref::batch_norm_train_forward(x.data(), w.data(), b.data(), y.data(), mean.data(),
                                            invstd.data(), running_mean.data(), running_var.data(),
                                            2, 2, 2, 0.1, 0.0));
  EXPECT_EQ(mean[0], 2.5);
  EXPECT_DOUBLE_EQ(invstd[0], 1.0 / std::sqrt(1.25));  // biased variance
  EXPECT_EQ(mean[1], 10.0);
  EXPECT_EQ(invstd[1], std::numeric_limits<double>::infinity());  // var 0, eps 0
  EXPECT_DOUBLE_EQ(y[0], -1.5 / std::sqrt(1.25) * 2);
  EXPECT_DOUBLE_EQ(y[5], 1.5 / std::sqrt(1.25) * 2);
  EXPECT_DOUBLE_EQ(running_mean[0], 0.25);
  EXPECT_DOUBLE_EQ(running_mean[1], 0.9 + 1.0);
  EXPECT_DOUBLE_EQ(running_var[0], 0.9 + 0.1 * 5.0 / 3.0);  // unbiased variance
  EXPECT_DOUBLE_EQ(running_var[1], 0.9);
}

TEST(ReferenceBatchNorm, EachChannelIsALayerNormOfItsValues) {
  const int64_t n = 3, c = 4, hw = 5;
  const auto x = randn(n * c * hw, 51, 2.0, 1.0), w = randn(c, 52), b = randn(c, 53);
  std::vector<double> y(x.size()), mean(c), invstd(c);
  ASSERT_TRUE(ref::batch_norm_train_forward(x.data(), w.data(), b.data(), y.data(), mean.data(),
                                            invstd.data(), nullptr, nullptr, n, c, hw, 0.1, 1e-5));
  for (int64_t ch = 0; ch < c; ++ch) {
    std::vector<double> values, expected(n * hw), lmean(1), lrstd(1);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) values.push_back(x[(i * c + ch) * hw + k]);
    ref::layer_norm_forward(values.data(), nullptr, nullptr, expected.data(), lmean.data(),
                            lrstd.data(), 1, n * hw, 1e-5);
    EXPECT_NEAR(mean[ch], lmean[0], 1e-15);
    EXPECT_NEAR(invstd[ch], lrstd[0], 1e-14);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k)
        EXPECT_NEAR(y[(i * c + ch) * hw + k], expected[i * hw + k] * w[ch] + b[ch], 1e-14);
  }
}

TEST(ReferenceBatchNorm, InferenceUsesRunningStats) {
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};  // [n=1, c=2, hw=3]
  const std::vector<double> rm = {2, -1}, rv = {3, 0.5}, w = {2, 1}, b = {0, 1};
  std::vector<double> y(6);
  ref::batch_norm_inference_forward(x.data(), w.data(), b.data(), rm.data(), rv.data(), y.data(),
                                    1, 2, 3, 1.0);
  EXPECT_DOUBLE_EQ(y[0], (1 - 2) / 2.0 * 2);
  EXPECT_DOUBLE_EQ(y[2], (3 - 2) / 2.0 * 2);
  EXPECT_DOUBLE_EQ(y[3], (4 + 1) / std::sqrt(1.5) + 1);
  ref::batch_norm_inference_forward(x.data(), nullptr, nullptr, rm.data(), rv.data(), y.data(), 1,
                                    2, 3, 1.0);
  EXPECT_DOUBLE_EQ(y[5], 7 / std::sqrt(1.5));
}

TEST(ReferenceBatchNorm, DegenerateBatches) {
  std::vector<double> x = {3.0, 4.0}, y = {-1, -1}, mean = {-1, -1}, invstd = {-1, -1};
  std::vector<double> rm = {0.5, 0.5}, rv = {2, 2};
  // One value per channel: torch raises; nothing is written.
  EXPECT_FALSE(ref::batch_norm_train_forward(x.data(), nullptr, nullptr, y.data(), mean.data(),
                                             invstd.data(), rm.data(), rv.data(), 1, 2, 1, 0.1,
                                             1e-5));
  EXPECT_EQ(y[0], -1);
  EXPECT_EQ(mean[0], -1);
  EXPECT_EQ(rv[1], 2);
  // Empty batch: running stats untouched, saved stats NaN.
  EXPECT_TRUE(ref::batch_norm_train_forward(x.data(), nullptr, nullptr, y.data(), mean.data(),
                                            invstd.data(), rm.data(), rv.data(), 0, 2, 5, 0.1,
                                            1e-5));
  EXPECT_TRUE(std::isnan(mean[1]));
  EXPECT_TRUE(std::isnan(invstd[0]));
  EXPECT_EQ(rm[0], 0.5);
  EXPECT_EQ(rv[0], 2);
}

TEST(ReferenceBatchNorm, BackwardMatchesFiniteDifferences) {
  const int64_t n = 3, c = 2, hw = 4;
  const double eps = 1e-5;
  const auto x = randn(n * c * hw, 54), wt = randn(c, 55, 0.5, 1.0), bs = randn(c, 56);
  const auto obj = randn(n * c * hw, 57);
  std::vector<double> y(x.size()), mean(c), invstd(c), dx(x.size()), dw(c), db(c);
  ASSERT_TRUE(ref::batch_norm_train_forward(x.data(), wt.data(), bs.data(), y.data(), mean.data(),
                                            invstd.data(), nullptr, nullptr, n, c, hw, 0.1, eps));
  ref::batch_norm_backward(x.data(), obj.data(), mean.data(), invstd.data(), wt.data(), dx.data(),
                           dw.data(), db.data(), n, c, hw);
  auto forward = [&](const std::vector<double>& xs, const std::vector<double>& ws,
                     const std::vector<double>& bsv) {
    std::vector<double> out(xs.size());
    ref::batch_norm_train_forward(xs.data(), ws.data(), bsv.data(), out.data(), nullptr, nullptr,
                                  nullptr, nullptr, n, c, hw, 0.1, eps);
    return out;
  };
  expect_all_near(dx, numeric_gradient([&](auto p) { return forward(p, wt, bs); }, x, obj), 1e-7);
  expect_all_near(dw, numeric_gradient([&](auto p) { return forward(x, p, bs); }, wt, obj), 1e-7);
  expect_all_near(db, numeric_gradient([&](auto p) { return forward(x, wt, p); }, bs, obj), 1e-7);
}

TEST(ReferenceBatchNorm, ChannelsLastRoundTrip) {
  const int64_t n = 2, c = 3, hw = 4;
  std::vector<double> nhwc(n * hw * c), nchw(nhwc.size()), back(nhwc.size());
  for (size_t i = 0; i < nhwc.size(); ++i) nhwc[i] = static_cast<double>(i);
  ref::channels_last_to_first(nhwc.data(), nchw.data(), n, c, hw);
  // NCHW element (i=1, ch=2, k=3) is NHWC element (i=1, k=3, ch=2).
  EXPECT_EQ(nchw[(1 * c + 2) * hw + 3], nhwc[(1 * hw + 3) * c + 2]);
  EXPECT_EQ(nchw[1], nhwc[3]);  // (0, 0, 1) <- (0, 1, 0)
  ref::channels_first_to_last(nchw.data(), back.data(), n, c, hw);
  EXPECT_EQ(back, nhwc);
}

}  // namespace
