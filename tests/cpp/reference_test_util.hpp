// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the CPU-oracle tests: seeded random data and finite-difference gradients.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace reducekit::reference_test {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline std::vector<double> randn(std::size_t n, unsigned seed, double scale = 1.0, double shift = 0.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(shift, scale);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// d/dx of sum(w * f(x)) by central differences, f mapping x to a vector of w.size() values.
inline std::vector<double> numeric_gradient(const std::function<std::vector<double>(std::vector<double>)>& f,
                                            const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-6 * std::max(1.0, std::fabs(x[i]));
    std::vector<double> xp(x), xm(x);
    xp[i] += h;
    xm[i] -= h;
    const std::vector<double> yp = f(xp), ym = f(xm);
    double d = 0;
    for (std::size_t j = 0; j < w.size(); ++j) d += w[j] * (yp[j] - ym[j]);
    grad[i] = d / (2 * h);
  }
  return grad;
}

inline void expect_all_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << i;
}

}  // namespace reducekit::reference_test
