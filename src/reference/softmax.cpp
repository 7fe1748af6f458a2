// SPDX-License-Identifier: Apache-2.0
// Softmax family: torch's formulas, evaluated in float64, one row at a time.
// A "row" is n values spaced by stride, so the same code serves the last dim and any other dim.
#include <cmath>
#include <limits>

#include "reference/reference.hpp"

namespace reducekit::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// NaN-propagating max, as torch's amax: any NaN makes the result NaN.
double row_max(const double* x, int64_t n, int64_t stride) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i * stride];
    if (std::isnan(v)) return kNaN;
    if (v > m) m = v;
  }
  return m;
}

// sum(exp(x - m)); with m = -inf (all -inf) or +inf, x - m has NaN terms, as in torch.
double sum_exp_shifted(const double* x, int64_t n, int64_t stride, double m) {
  CompensatedSum s;
  for (int64_t i = 0; i < n; ++i) s.add(std::exp(x[i * stride] - m));
  return s.value();
}

void softmax_span(const double* x, double* y, int64_t n, int64_t stride) {
  const double m = row_max(x, n, stride);
  const double s = sum_exp_shifted(x, n, stride, m);
  for (int64_t i = 0; i < n; ++i) y[i * stride] = std::exp(x[i * stride] - m) / s;
}

void log_softmax_span(const double* x, double* y, int64_t n, int64_t stride) {
  const double m = row_max(x, n, stride);
  const double log_s = std::log(sum_exp_shifted(x, n, stride, m));
  for (int64_t i = 0; i < n; ++i) y[i * stride] = (x[i * stride] - m) - log_s;
}

void softmax_backward_span(const double* y, const double* dy, double* dx, int64_t n,
                           int64_t stride) {
  CompensatedSum dot;
  for (int64_t i = 0; i < n; ++i) dot.add(dy[i * stride] * y[i * stride]);
  const double d = dot.value();
  for (int64_t i = 0; i < n; ++i) dx[i * stride] = y[i * stride] * (dy[i * stride] - d);
}

void log_softmax_backward_span(const double* y, const double* dy, double* dx, int64_t n,
                               int64_t stride) {
  CompensatedSum total;
  for (int64_t i = 0; i < n; ++i) total.add(dy[i * stride]);
  const double t = total.value();
  for (int64_t i = 0; i < n; ++i) dx[i * stride] = dy[i * stride] - std::exp(y[i * stride]) * t;
}

// A dim of a dense tensor seen as [outer, length, inner]: the row for (o, i) starts at
// o * length * inner + i and steps by inner.
struct DimView {
  int64_t outer = 1, length = 1, inner = 1;
};

bool view_dim(const Shape& shape, int64_t dim, DimView* view) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank > kMaxReferenceRank) return false;
  for (int64_t s : shape)
    if (s < 0) return false;
  const int64_t wrap = rank == 0 ? 1 : rank;  // a scalar has one virtual dim of size 1, as torch
  if (dim < -wrap || dim >= wrap) return false;
  if (dim < 0) dim += wrap;
  *view = DimView{};
  for (int64_t d = 0; d < rank; ++d) {
    if (d < dim) view->outer *= shape[d];
    if (d == dim) view->length = shape[d];
    if (d > dim) view->inner *= shape[d];
  }
  return true;
}

template <typename RowOp>
bool for_each_row_of_dim(const Shape& shape, int64_t dim, RowOp row_op) {
  DimView v;
  if (!view_dim(shape, dim, &v)) return false;
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) row_op(o * v.length * v.inner + i, v.length, v.inner);
  return true;
}

}  // namespace

void softmax_rows(const double* x, double* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) softmax_span(x + r * cols, y + r * cols, cols, 1);
}

void log_softmax_rows(const double* x, double* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) log_softmax_span(x + r * cols, y + r * cols, cols, 1);
}

void softmax_backward_rows(const double* y, const double* dy, double* dx, int64_t rows,
                           int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * cols;
    softmax_backward_span(y + o, dy + o, dx + o, cols, 1);
  }
}

void log_softmax_backward_rows(const double* y, const double* dy, double* dx, int64_t rows,
                               int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * cols;
    log_softmax_backward_span(y + o, dy + o, dx + o, cols, 1);
  }
}

bool softmax_dim(const double* x, double* y, const Shape& shape, int64_t dim) {
  return for_each_row_of_dim(shape, dim, [&](int64_t start, int64_t n, int64_t stride) {
    softmax_span(x + start, y + start, n, stride);
  });
}

bool log_softmax_dim(const double* x, double* y, const Shape& shape, int64_t dim) {
  return for_each_row_of_dim(shape, dim, [&](int64_t start, int64_t n, int64_t stride) {
    log_softmax_span(x + start, y + start, n, stride);
  });
}

bool softmax_backward_dim(const double* y, const double* dy, double* dx, const Shape& shape,
                          int64_t dim) {
  return for_each_row_of_dim(shape, dim, [&](int64_t start, int64_t n, int64_t stride) {
    softmax_backward_span(y + start, dy + start, dx + start, n, stride);
  });
}

bool log_softmax_backward_dim(const double* y, const double* dy, double* dx, const Shape& shape,
                              int64_t dim) {
  return for_each_row_of_dim(shape, dim, [&](int64_t start, int64_t n, int64_t stride) {
    log_softmax_backward_span(y + start, dy + start, dx + start, n, stride);
  });
}

}  // namespace reducekit::reference
