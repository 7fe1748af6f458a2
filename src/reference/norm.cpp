// SPDX-License-Identifier: Apache-2.0
// layer_norm and rms_norm over the trailing cols of [rows, cols], forward and backward.
// Moments are two-pass (mean, then squared deviations) with compensated sums; with cols == 0 the
// per-row statistics are NaN (0 / 0), and there is nothing else to write.
#include <cmath>
#include <vector>

#include "reference/reference.hpp"

namespace reducekit::reference {
namespace {

double weight_at(const double* weight, int64_t j) { return weight != nullptr ? weight[j] : 1.0; }
double bias_at(const double* bias, int64_t j) { return bias != nullptr ? bias[j] : 0.0; }

// Column sums over rows for dweight/dbias, compensated like everything else here.
struct ColumnSums {
  explicit ColumnSums(int64_t cols) : sums(static_cast<size_t>(cols)) {}
  void add(int64_t j, double v) { sums[static_cast<size_t>(j)].add(v); }
  void write(double* out) const {
    if (out == nullptr) return;
    for (size_t j = 0; j < sums.size(); ++j) out[j] = sums[j].value();
  }
  std::vector<CompensatedSum> sums;
};

}  // namespace

void layer_norm_forward(const double* x, const double* weight, const double* bias, double* y,
                        double* mean, double* rstd, int64_t rows, int64_t cols, double eps) {
  const double n = static_cast<double>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    CompensatedSum s;
    for (int64_t j = 0; j < cols; ++j) s.add(xr[j]);
    const double m = s.value() / n;
    CompensatedSum m2;
    for (int64_t j = 0; j < cols; ++j) m2.add((xr[j] - m) * (xr[j] - m));
    const double rs = 1.0 / std::sqrt(m2.value() / n + eps);
    for (int64_t j = 0; j < cols; ++j)
      y[r * cols + j] = (xr[j] - m) * rs * weight_at(weight, j) + bias_at(bias, j);
    if (mean != nullptr) mean[r] = m;
    if (rstd != nullptr) rstd[r] = rs;
  }
}

void layer_norm_backward(const double* x, const double* dy, const double* mean, const double* rstd,
                         const double* weight, double* dx, double* dweight, double* dbias,
                         int64_t rows, int64_t cols) {
  const double n = static_cast<double>(cols);
  ColumnSums dw(cols), db(cols);
  std::vector<double> xhat(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    const double* dyr = dy + r * cols;
    // With g = dy * w and xhat = (x - mean) * rstd:
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    CompensatedSum g_sum, g_xhat_sum;
    for (int64_t j = 0; j < cols; ++j) {
      xhat[j] = (xr[j] - mean[r]) * rstd[r];
      const double g = dyr[j] * weight_at(weight, j);
      g_sum.add(g);
      g_xhat_sum.add(g * xhat[j]);
      dw.add(j, dyr[j] * xhat[j]);
      db.add(j, dyr[j]);
    }
    if (dx == nullptr) continue;
    const double g_mean = g_sum.value() / n;
    const double g_xhat_mean = g_xhat_sum.value() / n;
    for (int64_t j = 0; j < cols; ++j) {
      const double g = dyr[j] * weight_at(weight, j);
      dx[r * cols + j] = rstd[r] * (g - g_mean - xhat[j] * g_xhat_mean);
    }
  }
  dw.write(dweight);
  db.write(dbias);
}

void rms_norm_forward(const double* x, const double* weight, const double* bias, double* y, double* rstd,
                      int64_t rows, int64_t cols, double eps) {
  const double n = static_cast<double>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    CompensatedSum squares;
    for (int64_t j = 0; j < cols; ++j) squares.add(xr[j] * xr[j]);
    const double mean_square = squares.value() / n;  // inf: the row has no finite scale, all NaN
    const double rs = std::isinf(mean_square) ? std::nan("") : 1.0 / std::sqrt(mean_square + eps);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = xr[j] * rs * weight_at(weight, j) + bias_at(bias, j);
    if (rstd != nullptr) rstd[r] = rs;
  }
}

void rms_norm_forward(const double* x, const double* weight, double* y, double* rstd, int64_t rows,
                      int64_t cols, double eps) {
  rms_norm_forward(x, weight, nullptr, y, rstd, rows, cols, eps);
}

void rms_norm_backward(const double* x, const double* dy, const double* rstd, const double* weight,
                       double* dx, double* dweight, double* dbias, int64_t rows, int64_t cols) {
  const double n = static_cast<double>(cols);
  ColumnSums dw(cols), db(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    const double* dyr = dy + r * cols;
    // With g = dy * w and xhat = x * rstd: dx = rstd * (g - xhat * mean(g * xhat)).
    CompensatedSum g_xhat_sum;
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = xr[j] * rstd[r];
      g_xhat_sum.add(dyr[j] * weight_at(weight, j) * xhat);
      dw.add(j, dyr[j] * xhat);
      db.add(j, dyr[j]);
    }
    if (dx == nullptr) continue;
    const double g_xhat_mean = g_xhat_sum.value() / n;
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = xr[j] * rstd[r];
      dx[r * cols + j] = rstd[r] * (dyr[j] * weight_at(weight, j) - xhat * g_xhat_mean);
    }
  }
  dw.write(dweight);
  db.write(dbias);
}

void rms_norm_backward(const double* x, const double* dy, const double* rstd, const double* weight,
                       double* dx, double* dweight, int64_t rows, int64_t cols) {
  rms_norm_backward(x, dy, rstd, weight, dx, dweight, nullptr, rows, cols);
}

}  // namespace reducekit::reference
