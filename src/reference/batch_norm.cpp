// SPDX-License-Identifier: Apache-2.0
// batch_norm over [n, c, hw] (NCHW with H*W flattened): per-channel statistics over n * hw values.
#include <cmath>
#include <limits>

#include "reference/reference.hpp"

namespace reducekit::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double weight_at(const double* weight, int64_t ch) { return weight != nullptr ? weight[ch] : 1.0; }
double bias_at(const double* bias, int64_t ch) { return bias != nullptr ? bias[ch] : 0.0; }

// Visits every (index into [n, c, hw]) of channel ch, batch-major then spatial.
template <typename F>
void for_each_in_channel(int64_t n, int64_t c, int64_t hw, int64_t ch, F f) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < hw; ++k) f((i * c + ch) * hw + k);
}

}  // namespace

bool batch_norm_train_forward(const double* x, const double* weight, const double* bias, double* y,
                              double* save_mean, double* save_invstd, double* running_mean,
                              double* running_var, int64_t n, int64_t c, int64_t hw,
                              double momentum, double eps) {
  const int64_t count = n * hw;
  if (count == 1) return false;  // torch: "Expected more than 1 value per channel when training"
  const double m = static_cast<double>(count);
  for (int64_t ch = 0; ch < c; ++ch) {
    if (count == 0) {  // torch returns early: nothing normalized, running stats untouched
      if (save_mean != nullptr) save_mean[ch] = kNaN;
      if (save_invstd != nullptr) save_invstd[ch] = kNaN;
      continue;
    }
    CompensatedSum s;
    for_each_in_channel(n, c, hw, ch, [&](int64_t i) { s.add(x[i]); });
    const double mu = s.value() / m;
    CompensatedSum m2;
    for_each_in_channel(n, c, hw, ch, [&](int64_t i) { m2.add((x[i] - mu) * (x[i] - mu)); });
    const double invstd = 1.0 / std::sqrt(m2.value() / m + eps);
    const double w = weight_at(weight, ch), b = bias_at(bias, ch);
    for_each_in_channel(n, c, hw, ch, [&](int64_t i) { y[i] = (x[i] - mu) * invstd * w + b; });
    if (save_mean != nullptr) save_mean[ch] = mu;
    if (save_invstd != nullptr) save_invstd[ch] = invstd;
    if (running_mean != nullptr)
      running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mu;
    if (running_var != nullptr)  // the running estimate uses the unbiased variance
      running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * (m2.value() / (m - 1.0));
  }
  return true;
}

void batch_norm_inference_forward(const double* x, const double* weight, const double* bias,
                                  const double* running_mean, const double* running_var,
                                  double* y, int64_t n, int64_t c, int64_t hw, double eps) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const double invstd = 1.0 / std::sqrt(running_var[ch] + eps);
    const double mu = running_mean[ch], w = weight_at(weight, ch), b = bias_at(bias, ch);
    for_each_in_channel(n, c, hw, ch, [&](int64_t i) { y[i] = (x[i] - mu) * invstd * w + b; });
  }
}

void batch_norm_backward(const double* x, const double* dy, const double* save_mean,
                         const double* save_invstd, const double* weight, double* dx,
                         double* dweight, double* dbias, int64_t n, int64_t c, int64_t hw) {
  const double m = static_cast<double>(n * hw);
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = save_mean[ch], invstd = save_invstd[ch];
    CompensatedSum dy_sum, dy_xhat_sum;
    for_each_in_channel(n, c, hw, ch, [&](int64_t i) {
      dy_sum.add(dy[i]);
      dy_xhat_sum.add(dy[i] * (x[i] - mu) * invstd);
    });
    if (dbias != nullptr) dbias[ch] = dy_sum.value();
    if (dweight != nullptr) dweight[ch] = dy_xhat_sum.value();
    if (dx == nullptr) continue;
    // dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), the training-mode gradient
    // (the batch statistics depend on x).
    const double dy_mean = dy_sum.value() / m, dy_xhat_mean = dy_xhat_sum.value() / m;
    const double scale = weight_at(weight, ch) * invstd;
    for_each_in_channel(n, c, hw, ch, [&](int64_t i) {
      const double xhat = (x[i] - mu) * invstd;
      dx[i] = scale * (dy[i] - dy_mean - xhat * dy_xhat_mean);
    });
  }
}

void channels_last_to_first(const double* x, double* y, int64_t n, int64_t c, int64_t hw) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < hw; ++k)
      for (int64_t ch = 0; ch < c; ++ch) y[(i * c + ch) * hw + k] = x[(i * hw + k) * c + ch];
}

void channels_first_to_last(const double* x, double* y, int64_t n, int64_t c, int64_t hw) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < hw; ++k)
      for (int64_t ch = 0; ch < c; ++ch) y[(i * hw + k) * c + ch] = x[(i * c + ch) * hw + k];
}

}  // namespace reducekit::reference
