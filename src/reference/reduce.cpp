// SPDX-License-Identifier: Apache-2.0
// Reductions over any set of dims, and their backward. Every op gathers one reduced set at a time
// into a buffer (row-major over the reduced dims) and applies a plain function to it, so the
// numerics of each op read as a few lines and the index bookkeeping lives in one place.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "reference/reference.hpp"

namespace reducekit::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Wraps, sorts and checks dims; false on rank > 8, negative sizes, out-of-range or repeated dims.
bool normalize_dims(const Shape& shape, const Dims& dims, Dims* out) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank > kMaxReferenceRank) return false;
  for (int64_t s : shape)
    if (s < 0) return false;
  const int64_t wrap = rank == 0 ? 1 : rank;  // torch lets a scalar name dim 0 / -1
  Dims result;
  for (int64_t d : dims) {
    if (d < -wrap || d >= wrap) return false;
    result.push_back(d < 0 ? d + wrap : d);
  }
  std::sort(result.begin(), result.end());
  if (std::adjacent_find(result.begin(), result.end()) != result.end()) return false;
  if (rank == 0) result.clear();  // reducing a scalar's virtual dim is reducing a set of one
  *out = result;
  return true;
}

// Offsets of every multi-index over `sizes` (row-major) under `strides`.
std::vector<int64_t> enumerate_offsets(const Shape& sizes, const Shape& strides) {
  const int64_t count = numel(sizes);
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t k = 0; k < count; ++k) {
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d) offset += index[d] * strides[d];
    offsets.push_back(offset);
    for (size_t d = sizes.size(); d-- > 0;) {  // odometer increment, last dim fastest
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return offsets;
}

void gather(const double* x, const ReductionLayout& layout, size_t o, std::vector<double>* set) {
  const int64_t base = layout.output_offsets[o];
  set->resize(layout.reduced_offsets.size());
  for (size_t k = 0; k < set->size(); ++k) (*set)[k] = x[base + layout.reduced_offsets[k]];
}

void scatter(const std::vector<double>& set, const ReductionLayout& layout, size_t o, double* x) {
  const int64_t base = layout.output_offsets[o];
  for (size_t k = 0; k < set.size(); ++k) x[base + layout.reduced_offsets[k]] = set[k];
}

// y[o] = f(reduced set of o); reject_empty refuses an empty reduced set (amax and friends).
template <typename Out, typename F>
bool reduce_sets(const double* x, const Shape& shape, const Dims& dims, Out* y, F f,
                 bool reject_empty = false) {
  ReductionLayout layout;
  if (!make_reduction_layout(shape, dims, &layout)) return false;
  if (reject_empty && layout.reduced_offsets.empty()) return false;
  std::vector<double> set;
  for (size_t o = 0; o < layout.output_offsets.size(); ++o) {
    gather(x, layout, o, &set);
    y[o] = f(set);
  }
  return true;
}

// For each output o: grad_f(o, x's set, grads) fills the set's gradients, which are scattered to
// dx. x may be nullptr for ops whose gradient does not depend on the input.
template <typename F>
bool backward_sets(const double* x, const Shape& shape, const Dims& dims, double* dx, F grad_f) {
  ReductionLayout layout;
  if (!make_reduction_layout(shape, dims, &layout)) return false;
  std::vector<double> set(layout.reduced_offsets.size(), 0.0), grads(set.size());
  for (size_t o = 0; o < layout.output_offsets.size(); ++o) {
    if (x != nullptr) gather(x, layout, o, &set);
    grad_f(o, set, &grads);
    scatter(grads, layout, o, dx);
  }
  return true;
}

double sum_of(const std::vector<double>& v) {
  CompensatedSum s;
  for (double e : v) s.add(e);
  return s.value();
}

double mean_of(const std::vector<double>& v) {
  return sum_of(v) / static_cast<double>(v.size());  // empty: 0 / 0 = NaN, as torch
}

double prod_of(const std::vector<double>& v) {
  double p = 1.0;
  for (double e : v) p *= e;
  return p;
}

// NaN-propagating max/min: the first NaN decides, like torch's amax/amin.
double max_of(const std::vector<double>& v) {
  double m = -kInf;
  for (double e : v) {
    if (std::isnan(e)) return e;
    m = std::max(m, e);
  }
  return m;
}

double min_of(const std::vector<double>& v) {
  double m = kInf;
  for (double e : v) {
    if (std::isnan(e)) return e;
    m = std::min(m, e);
  }
  return m;
}

// First NaN wins; otherwise the first element strictly better than all before it.
template <typename Better>
int64_t arg_extreme(const std::vector<double>& v, Better better) {
  int64_t best = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    if (std::isnan(v[k])) return static_cast<int64_t>(k);
    if (better(v[k], v[best])) best = static_cast<int64_t>(k);
  }
  return best;
}

double logsumexp_of(const std::vector<double>& v) {
  // torch: shift by the max unless it is +-inf, where the shift would make inf - inf.
  double m = max_of(v);
  if (std::isinf(m)) m = 0.0;
  CompensatedSum s;
  for (double e : v) s.add(std::exp(e - m));
  return std::log(s.value()) + m;
}

struct Moments {
  double mean;
  double var;
};

Moments moments_of(const std::vector<double>& v, double correction) {
  const double n = static_cast<double>(v.size());
  if (v.empty()) return {kNaN, kNaN};
  const double m = mean_of(v);
  CompensatedSum m2;
  for (double e : v) m2.add((e - m) * (e - m));
  return {m, m2.value() / std::max(0.0, n - correction)};
}

// Shared by amax and amin: both split dy among the elements equal to the result.
bool extremum_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                       const Dims& dims, double* dx) {
  return backward_sets(x, shape, dims, dx, [&](size_t o, const std::vector<double>& v,
                                               std::vector<double>* g) {
    int64_t count = 0;
    for (double e : v) count += e == y[o];
    const double share = dy[o] / static_cast<double>(count);
    // share * 0 rather than a plain 0 keeps torch's NaN when count is 0.
    for (size_t k = 0; k < v.size(); ++k) (*g)[k] = share * (v[k] == y[o] ? 1.0 : 0.0);
  });
}

}  // namespace

Dims all_dims(int64_t rank) {
  Dims d;
  for (int64_t i = 0; i < rank; ++i) d.push_back(i);
  return d;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool reduced_shape(const Shape& shape, const Dims& dims, bool keepdim, Shape* out) {
  Dims sorted;
  if (!normalize_dims(shape, dims, &sorted)) return false;
  Shape result;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const bool reduced = std::binary_search(sorted.begin(), sorted.end(), d);
    if (!reduced) result.push_back(shape[d]);
    else if (keepdim) result.push_back(1);
  }
  *out = result;
  return true;
}

bool make_reduction_layout(const Shape& shape, const Dims& dims, ReductionLayout* layout) {
  Dims sorted;
  if (!normalize_dims(shape, dims, &sorted)) return false;
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  Shape kept_sizes, kept_strides, reduced_sizes, reduced_strides;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const bool reduced = std::binary_search(sorted.begin(), sorted.end(), d);
    (reduced ? reduced_sizes : kept_sizes).push_back(shape[d]);
    (reduced ? reduced_strides : kept_strides).push_back(strides[d]);
  }
  layout->output_offsets = enumerate_offsets(kept_sizes, kept_strides);
  layout->reduced_offsets = enumerate_offsets(reduced_sizes, reduced_strides);
  return true;
}

bool sum(const double* x, const Shape& shape, const Dims& dims, double* y) {
  return reduce_sets(x, shape, dims, y, sum_of);
}

bool mean(const double* x, const Shape& shape, const Dims& dims, double* y) {
  return reduce_sets(x, shape, dims, y, mean_of);
}

bool prod(const double* x, const Shape& shape, const Dims& dims, double* y) {
  return reduce_sets(x, shape, dims, y, prod_of);
}

bool logsumexp(const double* x, const Shape& shape, const Dims& dims, double* y) {
  return reduce_sets(x, shape, dims, y, logsumexp_of);
}

bool amax(const double* x, const Shape& shape, const Dims& dims, double* y) {
  return reduce_sets(x, shape, dims, y, max_of, /*reject_empty=*/true);
}

bool amin(const double* x, const Shape& shape, const Dims& dims, double* y) {
  return reduce_sets(x, shape, dims, y, min_of, /*reject_empty=*/true);
}

bool argmax(const double* x, const Shape& shape, const Dims& dims, int64_t* y) {
  return reduce_sets(
      x, shape, dims, y,
      [](const std::vector<double>& v) { return arg_extreme(v, std::greater<double>()); },
      /*reject_empty=*/true);
}

bool argmin(const double* x, const Shape& shape, const Dims& dims, int64_t* y) {
  return reduce_sets(
      x, shape, dims, y,
      [](const std::vector<double>& v) { return arg_extreme(v, std::less<double>()); },
      /*reject_empty=*/true);
}

bool var(const double* x, const Shape& shape, const Dims& dims, double correction, double* y) {
  return reduce_sets(x, shape, dims, y, [&](const std::vector<double>& v) {
    return moments_of(v, correction).var;
  });
}

bool std(const double* x, const Shape& shape, const Dims& dims, double correction, double* y) {
  return reduce_sets(x, shape, dims, y, [&](const std::vector<double>& v) {
    return std::sqrt(moments_of(v, correction).var);
  });
}

bool var_mean(const double* x, const Shape& shape, const Dims& dims, double correction,
              double* var_out, double* mean_out) {
  int64_t o = 0;
  return reduce_sets(x, shape, dims, var_out, [&](const std::vector<double>& v) {
    const Moments m = moments_of(v, correction);
    mean_out[o++] = m.mean;
    return m.var;
  });
}

bool std_mean(const double* x, const Shape& shape, const Dims& dims, double correction,
              double* std_out, double* mean_out) {
  Shape out;
  if (!var_mean(x, shape, dims, correction, std_out, mean_out) || !reduced_shape(shape, dims, false, &out))
    return false;
  for (int64_t i = 0; i < numel(out); ++i) std_out[i] = std::sqrt(std_out[i]);
  return true;
}

bool sum_backward(const double* dy, const Shape& shape, const Dims& dims, double* dx) {
  return backward_sets(nullptr, shape, dims, dx,
                       [&](size_t o, const std::vector<double>&, std::vector<double>* g) {
                         std::fill(g->begin(), g->end(), dy[o]);
                       });
}

bool mean_backward(const double* dy, const Shape& shape, const Dims& dims, double* dx) {
  return backward_sets(nullptr, shape, dims, dx,
                       [&](size_t o, const std::vector<double>&, std::vector<double>* g) {
                         std::fill(g->begin(), g->end(), dy[o] / static_cast<double>(g->size()));
                       });
}

bool prod_backward(const double* x, const double* dy, const Shape& shape, const Dims& dims,
                   double* dx) {
  return backward_sets(x, shape, dims, dx, [&](size_t o, const std::vector<double>& v,
                                               std::vector<double>* g) {
    // g[k] = prod(v[0..k)) * prod(v(k..n)): no division, so zeros need no special case.
    double prefix = 1.0;
    for (size_t k = 0; k < v.size(); ++k) {
      (*g)[k] = prefix;
      prefix *= v[k];
    }
    double suffix = 1.0;
    for (size_t k = v.size(); k-- > 0;) {
      (*g)[k] = dy[o] * ((*g)[k] * suffix);
      suffix *= v[k];
    }
  });
}

bool logsumexp_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                        const Dims& dims, double* dx) {
  return backward_sets(x, shape, dims, dx, [&](size_t o, const std::vector<double>& v,
                                               std::vector<double>* g) {
    for (size_t k = 0; k < v.size(); ++k) (*g)[k] = dy[o] * std::exp(v[k] - y[o]);
  });
}

bool amax_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                   const Dims& dims, double* dx) {
  return extremum_backward(x, y, dy, shape, dims, dx);
}

bool amin_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                   const Dims& dims, double* dx) {
  return extremum_backward(x, y, dy, shape, dims, dx);
}

bool var_backward(const double* x, const double* dy, const Shape& shape, const Dims& dims,
                  double correction, double* dx) {
  return backward_sets(x, shape, dims, dx, [&](size_t o, const std::vector<double>& v,
                                               std::vector<double>* g) {
    const double m = mean_of(v);
    const double scale = 2.0 / (static_cast<double>(v.size()) - correction);
    for (size_t k = 0; k < v.size(); ++k) (*g)[k] = scale * dy[o] * (v[k] - m);
  });
}

bool std_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                  const Dims& dims, double correction, double* dx) {
  ReductionLayout layout;
  if (!make_reduction_layout(shape, dims, &layout)) return false;
  std::vector<double> dvar(layout.output_offsets.size());
  for (size_t o = 0; o < dvar.size(); ++o) dvar[o] = y[o] == 0.0 ? 0.0 : dy[o] / (2.0 * y[o]);
  return var_backward(x, dvar.data(), shape, dims, correction, dx);
}

}  // namespace reducekit::reference
