// SPDX-License-Identifier: Apache-2.0
// Tests of cross_entropy in the float64 oracle: agreement with -log_softmax[target], torch's label
// smoothing formula, ignore_index handling per reduction, argument checks and gradients.
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

using ref::CrossEntropyOptions;
using ref::LossReduction;

CrossEntropyOptions options(LossReduction reduction, double ls = 0.0, int64_t ignore = -100) {
  CrossEntropyOptions o;
  o.reduction = reduction;
  o.label_smoothing = ls;
  o.ignore_index = ignore;
  return o;
}

TEST(ReferenceCrossEntropy, EqualsNegativeLogSoftmaxOfTarget) {
  const int64_t rows = 4, classes = 9;
  const auto logits = randn(rows * classes, 61, 3.0);
  const std::vector<int64_t> targets = {0, 8, 3, 3};
  std::vector<double> logp(logits.size()), loss(rows), total(1), avg(1);
  ref::log_softmax_rows(logits.data(), logp.data(), rows, classes);
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), loss.data(), rows, classes,
                                         options(LossReduction::kNone)));
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), total.data(), rows,
                                         classes, options(LossReduction::kSum)));
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), avg.data(), rows, classes));
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(loss[r], -logp[r * classes + targets[r]]);
    sum += loss[r];
  }
  EXPECT_NEAR(total[0], sum, 1e-14);
  EXPECT_NEAR(avg[0], sum / rows, 1e-14);
}

TEST(ReferenceCrossEntropy, LabelSmoothingClosedForm) {
  // logits [0, ln 2]: p = [1/3, 2/3]. Target 1, C = 2, ls = 0.5:
  // 0.5 * -ln(2/3) + (0.5 / 2) * -(ln(1/3) + ln(2/3)).
  const std::vector<double> logits = {0.0, std::log(2.0)};
  const std::vector<int64_t> target = {1};
  std::vector<double> loss(1);
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), target.data(), loss.data(), 1, 2,
                                         options(LossReduction::kNone, 0.5)));
  const double expected =
      0.5 * -std::log(2.0 / 3.0) + 0.25 * -(std::log(1.0 / 3.0) + std::log(2.0 / 3.0));
  EXPECT_NEAR(loss[0], expected, 1e-15);
  // ls = 1: only the uniform part remains.
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), target.data(), loss.data(), 1, 2,
                                         options(LossReduction::kNone, 1.0)));
  EXPECT_NEAR(loss[0], 0.5 * -(std::log(1.0 / 3.0) + std::log(2.0 / 3.0)), 1e-15);
}

TEST(ReferenceCrossEntropy, NegInfLogitOnlyMattersWhereUsed) {
  // A -inf non-target logit is harmless without smoothing and makes the smoothed loss inf.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> logits = {0.0, 0.0, -inf};
  const std::vector<int64_t> target = {0};
  std::vector<double> loss(1);
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), target.data(), loss.data(), 1, 3,
                                         options(LossReduction::kNone)));
  EXPECT_NEAR(loss[0], std::log(2.0), 1e-15);
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), target.data(), loss.data(), 1, 3,
                                         options(LossReduction::kNone, 0.1)));
  EXPECT_EQ(loss[0], inf);
}

TEST(ReferenceCrossEntropy, IgnoredRowsAreExcluded) {
  const int64_t rows = 4, classes = 5;
  const auto logits = randn(rows * classes, 62);
  const std::vector<int64_t> targets = {2, -100, 4, -100};
  const std::vector<int64_t> kept_targets = {2, 4};
  const std::vector<double> kept_logits(logits.begin(), logits.begin() + classes);
  std::vector<double> kept(2 * classes);
  std::copy(logits.begin(), logits.begin() + classes, kept.begin());
  std::copy(logits.begin() + 2 * classes, logits.begin() + 3 * classes, kept.begin() + classes);
  for (double ls : {0.0, 0.2}) {
    std::vector<double> none(rows), mean(1), sum(1), kept_mean(1), kept_sum(1);
    ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), none.data(), rows,
                                           classes, options(LossReduction::kNone, ls)));
    ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), mean.data(), rows,
                                           classes, options(LossReduction::kMean, ls)));
    ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), sum.data(), rows,
                                           classes, options(LossReduction::kSum, ls)));
    ASSERT_TRUE(ref::cross_entropy_forward(kept.data(), kept_targets.data(), kept_mean.data(), 2,
                                           classes, options(LossReduction::kMean, ls)));
    ASSERT_TRUE(ref::cross_entropy_forward(kept.data(), kept_targets.data(), kept_sum.data(), 2,
                                           classes, options(LossReduction::kSum, ls)));
    EXPECT_EQ(none[1], 0.0);
    EXPECT_EQ(none[3], 0.0);
    EXPECT_GT(none[0], 0.0);
    EXPECT_NEAR(mean[0], (none[0] + none[2]) / 2, 1e-15);  // divided by 2 kept rows, not 4
    EXPECT_NEAR(mean[0], kept_mean[0], 1e-15);
    EXPECT_NEAR(sum[0], kept_sum[0], 1e-15);
  }
}

TEST(ReferenceCrossEntropy, AllIgnoredAndCustomIgnoreIndex) {
  const auto logits = randn(6, 63);
  const std::vector<int64_t> targets = {1, 1};
  std::vector<double> loss(2), dlogits(6, 42.0);
  const std::vector<double> dloss = {1.0};
  // ignore_index may name a real class.
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), loss.data(), 2, 3,
                                         options(LossReduction::kMean, 0.1, 1)));
  EXPECT_TRUE(std::isnan(loss[0]));  // 0 / 0
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), loss.data(), 2, 3,
                                         options(LossReduction::kSum, 0.1, 1)));
  EXPECT_EQ(loss[0], 0.0);
  ASSERT_TRUE(ref::cross_entropy_backward(logits.data(), targets.data(), dloss.data(),
                                          dlogits.data(), 2, 3,
                                          options(LossReduction::kMean, 0.1, 1)));
  EXPECT_EQ(dlogits, std::vector<double>(6, 0.0));
}

TEST(ReferenceCrossEntropy, RejectsBadTargetsAndSmoothing) {
  const auto logits = randn(6, 64);
  std::vector<double> loss(2, 42.0), dlogits(6);
  const std::vector<double> dloss = {1.0, 1.0};
  const std::vector<int64_t> too_big = {0, 3}, negative = {-1, 0}, fine = {0, 2};
  EXPECT_FALSE(ref::cross_entropy_forward(logits.data(), too_big.data(), loss.data(), 2, 3));
  EXPECT_FALSE(ref::cross_entropy_forward(logits.data(), negative.data(), loss.data(), 2, 3));
  EXPECT_FALSE(ref::cross_entropy_backward(logits.data(), too_big.data(), dloss.data(),
                                           dlogits.data(), 2, 3));
  EXPECT_FALSE(ref::cross_entropy_forward(logits.data(), fine.data(), loss.data(), 2, 3,
                                          options(LossReduction::kMean, 1.5)));
  EXPECT_FALSE(ref::cross_entropy_forward(logits.data(), fine.data(), loss.data(), 2, 3,
                                          options(LossReduction::kMean, -0.1)));
  EXPECT_FALSE(ref::cross_entropy_forward(
      logits.data(), fine.data(), loss.data(), 2, 3,
      options(LossReduction::kMean, std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(loss[0], 42.0);
  EXPECT_TRUE(ref::cross_entropy_forward(logits.data(), negative.data(), loss.data(), 2, 3,
                                         options(LossReduction::kMean, 0.0, -1)));
}

// sum(dloss * loss) differentiated by central differences against the analytic backward, with
// the options' extras (class weights, z-loss, soft-cap) switched on by `extras`.
void check_gradient(LossReduction reduction, double ls, bool extras = false) {
  const int64_t rows = 4, classes = 6;
  const auto logits = randn(rows * classes, 65, 2.0);
  const std::vector<int64_t> targets = {5, -100, 0, 2};
  const size_t outputs = reduction == LossReduction::kNone ? rows : 1;
  const auto dloss = randn(outputs, 66);
  const std::vector<double> weight = {0.5, 2.0, 1.0, 0.25, 3.0, 1.5};
  auto opts = options(reduction, ls);
  if (extras) {
    opts.weight = weight.data();
    opts.lse_square_scale = 0.01;
    opts.softcap = 3.0;
  }
  std::vector<double> dlogits(logits.size());
  ASSERT_TRUE(ref::cross_entropy_backward(logits.data(), targets.data(), dloss.data(),
                                          dlogits.data(), rows, classes, opts));
  for (size_t i = 0; i < logits.size(); ++i) {
    const double h = 1e-6;
    std::vector<double> lp(logits), lm(logits), yp(outputs), ym(outputs);
    lp[i] += h;
    lm[i] -= h;
    ref::cross_entropy_forward(lp.data(), targets.data(), yp.data(), rows, classes, opts);
    ref::cross_entropy_forward(lm.data(), targets.data(), ym.data(), rows, classes, opts);
    double numeric = 0;
    for (size_t j = 0; j < outputs; ++j) numeric += dloss[j] * (yp[j] - ym[j]);
    numeric /= 2 * h;
    EXPECT_NEAR(dlogits[i], numeric, 1e-8) << i;
  }
  for (int64_t j = 0; j < classes; ++j) EXPECT_EQ(dlogits[classes + j], 0.0);  // ignored row
}

TEST(ReferenceCrossEntropy, BackwardMatchesFiniteDifferences) {
  for (bool extras : {false, true})
    for (auto reduction : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean})
      for (double ls : {0.0, 0.1, 1.0}) {
        SCOPED_TRACE(testing::Message() << "reduction " << static_cast<int>(reduction) << " ls " << ls
                                        << (extras ? " with weights, z-loss, soft-cap" : ""));
        check_gradient(reduction, ls, extras);
      }
}

// Class weights scale each kept row by w[target], and kMean divides by the kept rows' weights;
// with smoothing the smoothing term weighs class j by w[j] (torch's formulas, spelled out here
// from log_softmax).
TEST(ReferenceCrossEntropy, ClassWeights) {
  const int64_t rows = 3, classes = 5;
  const auto logits = randn(rows * classes, 71, 2.0);
  const std::vector<int64_t> targets = {4, -100, 1};
  const std::vector<double> weight = {0.5, 2.0, 1.0, 0.25, 3.0};
  std::vector<double> logp(logits.size());
  ref::log_softmax_rows(logits.data(), logp.data(), rows, classes);
  for (double ls : {0.0, 0.2}) {
    auto opts = options(LossReduction::kNone, ls);
    opts.weight = weight.data();
    std::vector<double> loss(rows), mean(1);
    ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), loss.data(), rows, classes, opts));
    double total = 0;
    for (int64_t r : {0, 2}) {
      double smooth = 0;
      for (int64_t j = 0; j < classes; ++j) smooth += weight[j] * -logp[r * classes + j];
      const double want = (1 - ls) * weight[targets[r]] * -logp[r * classes + targets[r]] + ls / classes * smooth;
      EXPECT_NEAR(loss[r], want, 1e-12) << "row " << r << " ls " << ls;
      total += want;
    }
    EXPECT_EQ(loss[1], 0.0);
    opts.reduction = LossReduction::kMean;
    ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), mean.data(), rows, classes, opts));
    EXPECT_NEAR(mean[0], total / (weight[4] + weight[1]), 1e-12) << "ls " << ls;
  }
}

// The z-loss adds s * lse^2 to each kept row; soft-capping equals the plain loss of the capped
// logits.
TEST(ReferenceCrossEntropy, ZLossAndSoftcap) {
  const int64_t rows = 3, classes = 7;
  const auto logits = randn(rows * classes, 72, 6.0);
  const std::vector<int64_t> targets = {6, 0, -100};
  std::vector<double> plain(rows), with_z(rows), logp(logits.size());
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), plain.data(), rows, classes,
                                         options(LossReduction::kNone)));
  auto z = options(LossReduction::kNone);
  z.lse_square_scale = 1e-3;
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), with_z.data(), rows, classes, z));
  ref::log_softmax_rows(logits.data(), logp.data(), rows, classes);
  for (int64_t r : {0, 1}) {
    const double lse = logits[r * classes + targets[r]] - logp[r * classes + targets[r]];
    EXPECT_NEAR(with_z[r] - plain[r], 1e-3 * lse * lse, 1e-12) << "row " << r;
  }
  EXPECT_EQ(with_z[2], 0.0) << "ignored rows get no z-loss";

  std::vector<double> capped_logits(logits.size()), capped(rows), direct(rows);
  for (size_t i = 0; i < logits.size(); ++i) capped_logits[i] = 4.0 * std::tanh(logits[i] / 4.0);
  auto cap = options(LossReduction::kNone);
  cap.softcap = 4.0;
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), capped.data(), rows, classes, cap));
  ASSERT_TRUE(ref::cross_entropy_forward(capped_logits.data(), targets.data(), direct.data(), rows, classes,
                                         options(LossReduction::kNone)));
  for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(capped[r], direct[r], 1e-12) << "row " << r;
}

TEST(ReferenceCrossEntropy, LongVocabularyIsFast) {
  const int64_t classes = 256 * 1024;
  auto logits = randn(2 * classes, 67, 4.0);
  const std::vector<int64_t> targets = {17, classes - 1};
  std::vector<double> loss(1), dlogits(logits.size());
  const std::vector<double> dloss = {1.0};
  ASSERT_TRUE(ref::cross_entropy_forward(logits.data(), targets.data(), loss.data(), 2, classes,
                                         options(LossReduction::kMean, 0.1)));
  EXPECT_GT(loss[0], std::log(static_cast<double>(classes)) - 1.0);
  ASSERT_TRUE(ref::cross_entropy_backward(logits.data(), targets.data(), dloss.data(),
                                          dlogits.data(), 2, classes,
                                          options(LossReduction::kMean, 0.1)));
  // Each row's gradient sums to zero: softmax and the smoothed target both sum to one.
  double s = 0;
  for (int64_t j = 0; j < classes; ++j) s += dlogits[j];
  EXPECT_NEAR(s, 0.0, 1e-12);
}

}  // namespace
