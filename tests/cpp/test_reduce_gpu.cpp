// SPDX-License-Identifier: Apache-2.0
// GPU tests of the reduction family against the float64 CPU oracle (src/reference). Every case
// builds a logical tensor, lays it out in device memory (contiguous, padded rows, offset base,
// transposed), runs the op through reduce(), and compares with the oracle on the same rounded
// values. Outputs are poisoned before each run and guard elements after them must survive;
// workspaces must come back with their ticket prefix zeroed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "reducekit/reduce.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;
using reference::Dims;
using reference::Shape;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const ReduceOp kAllOps[] = {ReduceOp::kSum,    ReduceOp::kMean,   ReduceOp::kProd,      ReduceOp::kAmax,
                            ReduceOp::kAmin,   ReduceOp::kArgmax, ReduceOp::kArgmin,    ReduceOp::kLogsumexp,
                            ReduceOp::kVar,    ReduceOp::kStd,    ReduceOp::kVarMean,   ReduceOp::kStdMean};

bool is_arg(ReduceOp op) { return op == ReduceOp::kArgmax || op == ReduceOp::kArgmin; }
bool has_mean(ReduceOp op) { return op == ReduceOp::kVarMean || op == ReduceOp::kStdMean; }

// ---- the oracle ---------------------------------------------------------------------------------

struct Expected {
  bool defined = true;             // false: the op rejects this input (empty set for amax, ...)
  std::vector<double> value;       // the op's output (or var/std)
  std::vector<int64_t> index;      // argmax / argmin
  std::vector<double> mean;        // var_mean / std_mean
};

Expected oracle(ReduceOp op, const std::vector<double>& x, const Shape& shape, const Dims& dims, double correction) {
  Shape out_shape;
  EXPECT_TRUE(reference::reduced_shape(shape, dims, false, &out_shape));
  const std::size_t n = static_cast<std::size_t>(reference::numel(out_shape));
  Expected e;
  e.value.resize(n);
  e.mean.resize(n);
  e.index.resize(n);
  const double* p = x.data();
  double* y = e.value.data();
  switch (op) {
    case ReduceOp::kSum: e.defined = reference::sum(p, shape, dims, y); break;
    case ReduceOp::kMean: e.defined = reference::mean(p, shape, dims, y); break;
    case ReduceOp::kProd: e.defined = reference::prod(p, shape, dims, y); break;
    case ReduceOp::kAmax: e.defined = reference::amax(p, shape, dims, y); break;
    case ReduceOp::kAmin: e.defined = reference::amin(p, shape, dims, y); break;
    case ReduceOp::kArgmax: e.defined = reference::argmax(p, shape, dims, e.index.data()); break;
    case ReduceOp::kArgmin: e.defined = reference::argmin(p, shape, dims, e.index.data()); break;
    case ReduceOp::kLogsumexp: e.defined = reference::logsumexp(p, shape, dims, y); break;
    case ReduceOp::kVar: e.defined = reference::var(p, shape, dims, correction, y); break;
    case ReduceOp::kStd: e.defined = reference::std(p, shape, dims, correction, y); break;
    case ReduceOp::kVarMean: e.defined = reference::var_mean(p, shape, dims, correction, y, e.mean.data()); break;
    case ReduceOp::kStdMean: e.defined = reference::std_mean(p, shape, dims, correction, y, e.mean.data()); break;
  }
  return e;
}

// Per output: the size of its set and the sum of |x| over it (the scale of a sum's rounding).
struct SetFacts {
  std::vector<int64_t> count;
  std::vector<double> abs_sum;
};

SetFacts set_facts(const std::vector<double>& x, const Shape& shape, const Dims& dims) {
  reference::ReductionLayout layout;
  EXPECT_TRUE(reference::make_reduction_layout(shape, dims, &layout));
  SetFacts f;
  for (int64_t base : layout.output_offsets) {
    double s = 0;
    for (int64_t r : layout.reduced_offsets) s += std::fabs(x[base + r]);
    f.count.push_back(static_cast<int64_t>(layout.reduced_offsets.size()));
    f.abs_sum.push_back(s);
  }
  return f;
}

// close_enough (gpu_test_util.hpp) with a scale that fits each op's rounding: sums err by a few
// units of the accumulator times sum|x|; a product by one unit per factor; moments and
// logsumexp relative to their own value.
template <typename T> bool matches(ReduceOp op, double got, double want, int64_t n, double abs_sum) {
  switch (op) {
    case ReduceOp::kSum: return close_enough<T>(got, want, abs_sum);
    case ReduceOp::kMean: return close_enough<T>(got, want, n ? abs_sum / n : 0);
    case ReduceOp::kProd: {
      const double eps = sizeof(T) == 8 ? 1.1e-16 : 6e-8;
      const double per_unit = sizeof(T) == 8 ? 1e-13 : 4e-6;  // close_enough's scale factor
      return close_enough<T>(got, want, std::fabs(want) * (n + 1) * eps / per_unit);
    }
    case ReduceOp::kLogsumexp: return close_enough<T>(got, want, std::max(1.0, std::fabs(want)));
    default: return close_enough<T>(got, want, std::fabs(want));
  }
}

// ---- layouts ------------------------------------------------------------------------------------

// A logical tensor placed in a buffer: physical dim order `order` (outermost first), `pad`
// extra elements after each innermost run, data starting `offset` elements in.
struct Layout {
  Shape shape;
  std::vector<int> order;  // empty: row-major
  int64_t pad = 0;
  int64_t offset = 0;

  std::vector<int64_t> strides() const {
    const int rank = static_cast<int>(shape.size());
    std::vector<int> ord = order;
    if (ord.empty()) {
      ord.resize(rank);
      std::iota(ord.begin(), ord.end(), 0);
    }
    std::vector<int64_t> st(rank, 1);
    int64_t step = 1;
    for (int i = rank - 1; i >= 0; --i) {
      st[ord[i]] = step;
      step *= shape[ord[i]] + (i == rank - 1 ? pad : 0);
    }
    return st;
  }
  // Elements the buffer needs.
  int64_t span() const {
    int64_t last = 0;
    const std::vector<int64_t> st = strides();
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 0) return offset + 1;
      last += (shape[d] - 1) * st[d];
    }
    return offset + last + 1;
  }
};

template <typename T> std::vector<T> physical_image(const std::vector<double>& logical, const Layout& l) {
  std::vector<T> image(static_cast<std::size_t>(l.span()), from_double<T>(0.0));
  const std::vector<int64_t> st = l.strides();
  const int rank = static_cast<int>(l.shape.size());
  std::vector<int64_t> idx(rank, 0);
  for (std::size_t i = 0; i < logical.size(); ++i) {
    int64_t off = l.offset;
    for (int d = 0; d < rank; ++d) off += idx[d] * st[d];
    image[off] = from_double<T>(logical[i]);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < l.shape[d]) break;
      idx[d] = 0;
    }
  }
  return image;
}

TensorView device_view(void* base, DType dtype, const Layout& l) {
  TensorView v;
  v.data = static_cast<char*>(base) + l.offset * static_cast<int64_t>(dtype_size(dtype));
  v.dtype = dtype;
  v.rank = static_cast<int>(l.shape.size());
  const std::vector<int64_t> st = l.strides();
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = l.shape[d];
    v.strides[d] = st[d];
  }
  v.device = 0;
  return v;
}

// Logical values by kind, rounded to T. "special" (alone or after "near_one+") puts NaN and
// +-inf into a few sets; "ties" draws small integers (argmax ties everywhere); "large_mean" is
// 1e4 + randn; "huge" is 5e18 * randn (float32/64 only: the variance is near float32's max).
template <typename T> std::vector<double> make_logical(int64_t n, const std::string& kind, uint32_t seed) {
  std::vector<double> v = make_values(n, "randn", seed);
  for (double& x : v) {
    if (kind == "large_mean") x = 1e4 + x;
    else if (kind == "huge") x *= 5e18;
    else if (kind == "ties") x = std::round(2 * x);
    else if (kind.rfind("near_one", 0) == 0) x = 1 + x / 64;  // products stay finite over long sets
    else if (kind == "constant") x = 3.25;
  }
  if (kind.find("special") != std::string::npos && n > 0) {
    v[0] = kNaN;
    v[n / 3] = kInf;
    v[n / 2] = -kInf;
    v[n - 1] = -kInf;
    v[(2 * n) / 3] = kNaN;
  }
  // "infs": +inf at every 97th element, -inf at every 100003rd, so most sets hold several +inf
  // that meet in merges (mean inf) and a few also a -inf (mean NaN); variance NaN either way.
  if (kind == "infs")
    for (int64_t i = 0; i < n; ++i) {
      if (i % 97 == 5) v[i] = kInf;
      if (i % 100003 == 1000) v[i] = -kInf;
    }
  for (double& x : v) x = to_double(from_double<T>(x));
  return v;
}

// ---- one case -----------------------------------------------------------------------------------

struct Case {
  Layout layout;
  bool all = false;  // dim=None
  Dims dims;
  bool keepdim = false;
  std::string values = "randn";
  double correction = 1.0;
};

std::string describe(const Case& c) {
  std::string s = "shape [";
  for (std::size_t i = 0; i < c.layout.shape.size(); ++i) s += (i ? "," : "") + std::to_string(c.layout.shape[i]);
  s += "] dims ";
  if (c.all) s += "None";
  for (int64_t d : c.dims) s += std::to_string(d) + " ";
  s += c.keepdim ? " keepdim" : "";
  s += " pad " + std::to_string(c.layout.pad) + " offset " + std::to_string(c.layout.offset) + " values " + c.values;
  if (!c.layout.order.empty()) s += " transposed";
  return s;
}

DimList dim_list(const Case& c) { return c.all ? DimList::every() : DimList::of(c.dims.data(), static_cast<int>(c.dims.size())); }

// A contiguous output of the shape reduce_requirements gave, on device 0.
TensorView output_view(const ReduceRequirements& req, void* data, DType dtype) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = 0;
  v.rank = req.out_rank;
  int64_t stride = 1;
  for (int d = req.out_rank - 1; d >= 0; --d) {
    v.sizes[d] = req.out_sizes[d];
    v.strides[d] = stride;
    stride *= req.out_sizes[d];
  }
  return v;
}

// Allocates out (+ guard) poisoned, runs reduce(), and returns the outputs as doubles / indices.
struct Result {
  Status status;
  std::vector<double> value, mean;
  std::vector<int64_t> index;
};

template <typename T>
Result run_on_device(ReduceOp op, const TensorView& x, DimList dims, bool keepdim, double correction) {
  Result r;
  ReduceRequirements req;
  r.status = reduce_requirements(op, x, dims, keepdim, &req);
  if (!r.status.is_ok()) return r;
  int64_t n = 1;
  for (int d = 0; d < req.out_rank; ++d) n *= req.out_sizes[d];
  constexpr int64_t kGuard = 16;
  const DType out_type = is_arg(op) ? DType::kInt64 : x.dtype;
  const std::size_t out_bytes = static_cast<std::size_t>(n + kGuard) * dtype_size(out_type);
  DeviceBuffer out(out_bytes), mean(out_bytes), ws(req.workspace_bytes);
  EXPECT_TRUE(out.get() && mean.get() && ws.get());
  EXPECT_EQ(cudaMemset(out.get(), 0xff, out_bytes), cudaSuccess);  // NaN (or -1 for indices)
  EXPECT_EQ(cudaMemset(mean.get(), 0xff, out_bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(ws.get(), 0, req.workspace_bytes), cudaSuccess);
  r.status = reduce(op, x, dims, keepdim, correction, output_view(req, out.get(), out_type),
                    output_view(req, mean.get(), x.dtype),
                    Workspace{ws.get(), req.workspace_bytes}, nullptr);
  if (!r.status.is_ok()) return r;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());

  std::vector<unsigned char> raw(out_bytes), raw_mean(out_bytes), tickets(req.workspace_zeroed_bytes);
  EXPECT_EQ(cudaMemcpy(raw.data(), out.get(), out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(raw_mean.data(), mean.get(), out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(tickets.data(), ws.get(), tickets.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::all_of(tickets.begin(), tickets.end(), [](unsigned char b) { return b == 0; }))
      << "the workspace's ticket prefix was not left zeroed";
  const std::size_t elem = dtype_size(out_type);
  for (std::size_t b = static_cast<std::size_t>(n) * elem; b < out_bytes; ++b)
    if (raw[b] != 0xff || raw_mean[b] != 0xff) {
      ADD_FAILURE() << "byte " << b << " past the " << n << " outputs was written";
      break;
    }
  for (int64_t i = 0; i < n; ++i) {
    if (is_arg(op)) {
      int64_t v;
      std::memcpy(&v, &raw[i * elem], elem);
      r.index.push_back(v);
    } else {
      T v, m;
      std::memcpy(&v, &raw[i * elem], elem);
      std::memcpy(&m, &raw_mean[i * elem], elem);
      r.value.push_back(to_double(v));
      r.mean.push_back(to_double(m));
    }
  }
  return r;
}

// Runs one op on one case: directly, or, where the layout asks for it, on the permuted copy the
// binding would make (after checking that the direct call refuses without touching anything).
template <typename T> void check_op(ReduceOp op, const Case& c, const std::vector<double>& logical, const TensorView& x) {
  SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " " << dtype_name(dtype_of<T>()) << " " << describe(c));
  const Shape& shape = c.layout.shape;
  const Dims dims = c.all ? reference::all_dims(static_cast<int64_t>(shape.size())) : c.dims;
  const Expected want = oracle(op, logical, shape, dims, c.correction);

  ReduceRequirements req;
  const Status s = reduce_requirements(op, x, dim_list(c), c.keepdim, &req);
  if (!want.defined) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_EQ(s.message().rfind("dim:", 0), 0u) << s.message();
    return;
  }
  ASSERT_TRUE(s.is_ok()) << s.message();
  Shape keep_shape;
  ASSERT_TRUE(reference::reduced_shape(shape, dims, c.keepdim, &keep_shape));
  EXPECT_EQ(Shape(req.out_sizes, req.out_sizes + req.out_rank), keep_shape);

  Result got;
  DeviceBuffer copy(std::max<int64_t>(1, reference::numel(shape)) * sizeof(T));
  if (!req.needs_copy) {
    got = run_on_device<T>(op, x, dim_list(c), c.keepdim, c.correction);
  } else {
    const Result refused = run_on_device<T>(op, x, dim_list(c), c.keepdim, c.correction);
    ASSERT_EQ(refused.status.code(), StatusCode::kUnsupported) << refused.status.message();
    // The binding's fallback: x permuted (kept dims, then reduced dims), made contiguous, reduced
    // over its trailing dims.
    Shape permuted_shape;
    std::vector<int> perm(req.permutation, req.permutation + shape.size());
    for (int d : perm) permuted_shape.push_back(shape[d]);
    Layout dense{permuted_shape};
    std::vector<double> permuted(logical.size());
    const std::vector<int64_t> src_strides = Layout{shape}.strides();
    std::vector<int64_t> idx(shape.size(), 0);
    for (std::size_t i = 0; i < permuted.size(); ++i) {
      int64_t off = 0;
      for (std::size_t d = 0; d < shape.size(); ++d) off += idx[d] * src_strides[perm[d]];
      permuted[i] = logical[off];
      for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
        if (++idx[d] < permuted_shape[d]) break;
        idx[d] = 0;
      }
    }
    const std::vector<T> image = physical_image<T>(permuted, dense);
    ASSERT_EQ(cudaMemcpy(copy.get(), image.data(), image.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    const int kept = static_cast<int>(shape.size()) - static_cast<int>(dims.size());
    Dims trailing;
    for (int d = kept; d < static_cast<int>(shape.size()); ++d) trailing.push_back(d);
    got = run_on_device<T>(op, device_view(copy.get(), dtype_of<T>(), dense),
                           DimList::of(trailing.data(), static_cast<int>(trailing.size())), false, c.correction);
  }
  ASSERT_TRUE(got.status.is_ok()) << got.status.message();

  const SetFacts facts = set_facts(logical, shape, dims);
  int failures = 0;
  for (std::size_t i = 0; i < want.value.size() && failures < 5; ++i) {
    if (is_arg(op)) {
      if (got.index[i] != want.index[i]) {
        ADD_FAILURE() << "output " << i << ": index " << got.index[i] << ", want " << want.index[i];
        ++failures;
      }
      continue;
    }
    if (!matches<T>(op, got.value[i], want.value[i], facts.count[i], facts.abs_sum[i])) {
      ADD_FAILURE() << "output " << i << ": got " << got.value[i] << ", want " << want.value[i];
      ++failures;
    }
    if (has_mean(op) && !matches<T>(ReduceOp::kMean, got.mean[i], want.mean[i], facts.count[i], facts.abs_sum[i])) {
      ADD_FAILURE() << "mean output " << i << ": got " << got.mean[i] << ", want " << want.mean[i];
      ++failures;
    }
  }
}

template <typename T> void check_case(const Case& c, std::initializer_list<ReduceOp> ops = {}) {
  const std::vector<double> logical =
      make_logical<T>(reference::numel(c.layout.shape), c.values, static_cast<uint32_t>(c.layout.span()));
  const std::vector<T> image = physical_image<T>(logical, c.layout);
  DeviceBuffer buf(image.size() * sizeof(T));
  ASSERT_TRUE(buf.get());
  ASSERT_EQ(cudaMemcpy(buf.get(), image.data(), image.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  const TensorView x = device_view(buf.get(), dtype_of<T>(), c.layout);
  // Products of long randn sets under- or overflow part-way, where the order of the factors
  // decides between 0, inf and NaN: prod is checked on values near 1 (and constants) only.
  const bool prod_ok = c.values.rfind("near_one", 0) == 0 || c.values == "constant";
  for (ReduceOp op : kAllOps) {
    if (ops.size() > 0 && std::find(ops.begin(), ops.end(), op) == ops.end()) continue;
    if (op != ReduceOp::kProd || prod_ok) check_op<T>(op, c, logical, x);
  }
}

// ---- the sweeps ---------------------------------------------------------------------------------

Case rows(int64_t m, int64_t n, std::string values = "randn", int64_t pad = 0, int64_t offset = 0) {
  return Case{Layout{{m, n}, {}, pad, offset}, false, {-1}, false, std::move(values)};
}
Case columns(int64_t k, int64_t n, std::string values = "randn", int64_t pad = 0, int64_t offset = 0) {
  return Case{Layout{{k, n}, {}, pad, offset}, false, {0}, false, std::move(values)};
}
Case everything(Shape shape, std::string values = "randn", int64_t offset = 0) {
  return Case{Layout{std::move(shape), {}, 0, offset}, true, {}, false, std::move(values)};
}

template <typename T> void row_sweep() {
  for (int64_t n : {1, 2, 3, 31, 33, 64, 781, 2045, 2048, 4099, 40009, 100003}) {
    const int64_t m = std::clamp<int64_t>((1 << 19) / n, 3, 37);
    check_case<T>(rows(m, n));
    check_case<T>(rows(m, n, "near_one", 64 - n % 64 + 8));  // padded rows, aligned stride
    check_case<T>(rows(m, n, "special", 1, 1));              // odd stride, base off by one element
    check_case<T>(rows(m, n, "near_one+special", 0, 1), {ReduceOp::kProd});
    if (::testing::Test::HasFailure()) return;                // one bad length is enough
  }
  check_case<T>(rows(9, 40000, "infs"));  // two chunks: infinite means meet in the chunk merge
  check_case<T>(rows(37, 3000, "infs"));
  check_case<T>(rows(7, 3000, "large_mean"));
  check_case<T>(rows(7, 3000, "ties"));
  check_case<T>(rows(5, 70000, "constant"));
  if constexpr (sizeof(T) >= 4) check_case<T>(rows(6, 5000, "huge"));
}

template <typename T> void column_sweep() {
  for (int64_t k : {1, 2, 7, 64, 65, 300, 4099}) {
    for (int64_t n : {2, 33, 300}) {
      check_case<T>(columns(k, n));
      check_case<T>(columns(k, n, "special", 3, 1));
    }
    if (::testing::Test::HasFailure()) return;
  }
  // Short columns (K < 64: a lane per column, 32 lanes across): several tiles, odd widths and
  // strides, special values, ties.
  check_case<T>(columns(16, 3001, "special", 3, 1));
  check_case<T>(columns(63, 2500, "ties"));
  check_case<T>(columns(48, 1100, "infs"));
  check_case<T>(Case{Layout{{5, 40, 700}}, false, {1}, false, "randn"});
  check_case<T>(columns(4099, 5, "infs"));   // split: segments merge through the workspace
  check_case<T>(columns(300, 5000, "infs"));  // one CTA walks the segments
  check_case<T>(columns(4099, 5, "near_one"));
  check_case<T>(columns(1000, 64, "large_mean"));
  check_case<T>(columns(1000, 40, "ties"));
  check_case<T>(columns(200, 40, "constant"));
  if constexpr (sizeof(T) >= 4) check_case<T>(columns(500, 40, "huge"));
  // Many columns: one CTA per (tile, group of segments) for float32 (2 segments: 2 parts).
  check_case<T>(columns(300, 16384), {ReduceOp::kSum, ReduceOp::kArgmax, ReduceOp::kVarMean, ReduceOp::kLogsumexp});
  // Segment counts that are not a multiple of the 8 groups (256-row segments), every way the
  // work is spread: one CTA per segment (9 and 11 segments), one per group (float32: 9 segments,
  // group 0 folds segments 0 and 8), and one CTA per tile walking all 9 segments (520 outer
  // slices; 16-bit types split them).
  check_case<T>(columns(2100, 5, "infs"));
  check_case<T>(columns(2600, 33, "special", 3, 1));
  check_case<T>(columns(2100, 16384), {ReduceOp::kSum, ReduceOp::kArgmax, ReduceOp::kVarMean, ReduceOp::kLogsumexp});
  check_case<T>(Case{Layout{{520, 2100, 32}}, false, {1}, false, "randn"},
                {ReduceOp::kSum, ReduceOp::kArgmin, ReduceOp::kStdMean, ReduceOp::kAmax});
  // A middle dim: [outer, K, inner].
  check_case<T>(Case{Layout{{3, 257, 70}}, false, {1}, false, "randn"});
  check_case<T>(Case{Layout{{3, 257, 70}}, false, {-2}, true, "special"});
}

template <typename T> void all_sweep() {
  for (int64_t n : {1, 5, 1000, 4096, 16389, (1 << 20) + 3}) {
    check_case<T>(everything({n}));
    check_case<T>(everything({n}, "special", 1));
  }
  check_case<T>(everything({3, 7, 11}, "near_one"));
  check_case<T>(everything({1000}, "infs"));  // +inf only
  check_case<T>(everything({200000}, "infs"));
  check_case<T>(everything({1 << 19}, "large_mean"));
  check_case<T>(everything({3000}, "ties"));
  check_case<T>(everything({3 << 20}, "randn"), {ReduceOp::kSum, ReduceOp::kArgmin, ReduceOp::kStdMean});
  Case keep = everything({4, 5, 6});
  keep.keepdim = true;
  check_case<T>(keep);
}

// Dims as lists, transposed and permuted layouts (some need the copy), keepdim, zero sizes.
template <typename T> void dims_sweep() {
  const Shape s{4, 6, 9};
  for (const Dims& d : {Dims{0, 2}, Dims{1, 2}, Dims{0, 1}, Dims{-1, 0}, Dims{2, 1, 0}, Dims{}}) {
    check_case<T>(Case{Layout{s}, false, d, false, "randn"});
    check_case<T>(Case{Layout{s}, false, d, true, "ties"});
    check_case<T>(Case{Layout{s, {2, 0, 1}, 3, 1}, false, d, false, "special"});  // permuted, padded, offset
  }
  // Transposed matrix: reducing the logical last dim walks a column in memory, and vice versa.
  check_case<T>(Case{Layout{{50, 300}, {1, 0}}, false, {1}, false, "randn"});
  check_case<T>(Case{Layout{{50, 300}, {1, 0}}, false, {0}, false, "randn"});
  check_case<T>(Case{Layout{{50, 300}, {1, 0}}, true, {}, false, "ties"});  // argmax must count logically
  // Zero sizes: no outputs, or empty sets (sum 0, prod 1, mean/var NaN, amax an error).
  check_case<T>(Case{Layout{{0, 5}}, false, {1}, false});
  check_case<T>(Case{Layout{{5, 0}}, false, {1}, false});
  check_case<T>(Case{Layout{{5, 0}}, false, {1}, true});
  check_case<T>(Case{Layout{{3, 0, 4}}, false, {1}, false});
  check_case<T>(Case{Layout{{0}}, true, {}, false});
  check_case<T>(Case{Layout{{}}, true, {}, false});  // a scalar
  // n - correction <= 0: inf or NaN, like torch.
  for (double correction : {1.0, 2.0, 7.5, 0.0}) {
    Case c = rows(4, 2, "randn");
    c.correction = correction;
    check_case<T>(c, {ReduceOp::kVar, ReduceOp::kStd, ReduceOp::kVarMean});
    Case one = rows(3, 1, "randn");
    one.correction = correction;
    check_case<T>(one, {ReduceOp::kVar, ReduceOp::kStdMean});
  }
}

class ReduceGpu : public ::testing::Test {
 protected:
  void SetUp() override { REDUCEKIT_REQUIRE_GPU(); }
};

#define REDUCEKIT_REDUCE_SWEEP(NAME, SWEEP)                        \
  TEST_F(ReduceGpu, NAME##Float32) { SWEEP<float>(); }             \
  TEST_F(ReduceGpu, NAME##Float16) { SWEEP<__half>(); }            \
  TEST_F(ReduceGpu, NAME##BFloat16) { SWEEP<__nv_bfloat16>(); }    \
  TEST_F(ReduceGpu, NAME##Float64) { SWEEP<double>(); }

REDUCEKIT_REDUCE_SWEEP(Rows, row_sweep)
REDUCEKIT_REDUCE_SWEEP(Columns, column_sweep)
REDUCEKIT_REDUCE_SWEEP(All, all_sweep)
REDUCEKIT_REDUCE_SWEEP(Dims, dims_sweep)

TEST_F(ReduceGpu, SumAndMeanWithAnotherOutputDtype) {
  const Layout l{{33, 1000}};
  const std::vector<double> logical = make_logical<__half>(33 * 1000, "randn", 5);
  const std::vector<__half> image = physical_image<__half>(logical, l);
  DeviceBuffer x(image.size() * 2), out(33 * 8), ws(64);
  REDUCEKIT_CUDA_OK(cudaMemcpy(x.get(), image.data(), image.size() * 2, cudaMemcpyHostToDevice));
  const int64_t dim = 1;
  for (DType out_type : {DType::kFloat32, DType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
      TensorView o = make_contiguous_view(out.get(), out_type, {33}, 0);
      const Status s = reduce(op, device_view(x.get(), DType::kFloat16, l), DimList::of(&dim, 1), false, 0, o, {},
                              Workspace{ws.get(), 64}, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      std::vector<double> got(33);
      if (out_type == DType::kFloat64) {
        REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), out.get(), 33 * 8, cudaMemcpyDeviceToHost));
      } else {
        std::vector<float> f(33);
        REDUCEKIT_CUDA_OK(cudaMemcpy(f.data(), out.get(), 33 * 4, cudaMemcpyDeviceToHost));
        got.assign(f.begin(), f.end());
      }
      const Expected want = oracle(op, logical, l.shape, {1}, 0);
      const SetFacts facts = set_facts(logical, l.shape, {1});
      for (int i = 0; i < 33; ++i) {
        const double tol = (out_type == DType::kFloat64 ? 1e-12 : 1e-5) * facts.abs_sum[i];
        EXPECT_NEAR(got[i], want.value[i] , op == ReduceOp::kMean ? tol / 1000 : tol) << reduce_op_name(op) << " " << i;
      }
    }
  }
}

TEST_F(ReduceGpu, LargeMeanVarianceIsAccurate) {
  // 1e4 + randn in float32: the relative error of var stays under 1e-4 on every path.
  for (const Case& c : {rows(8, 100003, "large_mean"), columns(4099, 40, "large_mean"), everything({1 << 21}, "large_mean")}) {
    SCOPED_TRACE(describe(c));
    const std::vector<double> logical = make_logical<float>(reference::numel(c.layout.shape), c.values, 9);
    const DeviceBuffer buf(physical_image<float>(logical, c.layout));
    const Result got = run_on_device<float>(ReduceOp::kVar, device_view(buf.get(), DType::kFloat32, c.layout),
                                            dim_list(c), false, 1.0);
    ASSERT_TRUE(got.status.is_ok()) << got.status.message();
    const Dims dims = c.all ? reference::all_dims(1) : c.dims;
    const Expected want = oracle(ReduceOp::kVar, logical, c.layout.shape, dims, 1.0);
    for (std::size_t i = 0; i < want.value.size(); ++i)
      EXPECT_LT(std::fabs(got.value[i] / want.value[i] - 1), 1e-4) << "output " << i;
  }
}

// ---- determinism and batch invariance -----------------------------------------------------------

template <typename T> std::vector<unsigned char> output_bits(ReduceOp op, const TensorView& x, DimList dims) {
  const Result r = run_on_device<T>(op, x, dims, false, 1.0);
  EXPECT_TRUE(r.status.is_ok()) << r.status.message();
  std::vector<unsigned char> bits;
  auto append = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    bits.insert(bits.end(), b, b + n);
  };
  append(r.value.data(), r.value.size() * sizeof(double));
  append(r.mean.data(), has_mean(op) ? r.mean.size() * sizeof(double) : 0);
  append(r.index.data(), r.index.size() * sizeof(int64_t));
  return bits;
}

std::vector<unsigned char> slice_bits(const std::vector<unsigned char>& bits, std::size_t first,
                                                            std::size_t count, std::size_t total, bool two) {
  // output_bits packs [values][means] as doubles (or indices as int64): pick outputs first..first+count.
  std::vector<unsigned char> s;
  for (int part = 0; part < (two ? 2 : 1); ++part)
    s.insert(s.end(), bits.begin() + (part * total + first) * 8, bits.begin() + (part * total + first + count) * 8);
  return s;
}

const ReduceOp kInvarianceOps[] = {ReduceOp::kSum, ReduceOp::kArgmax, ReduceOp::kLogsumexp, ReduceOp::kVarMean,
                                   ReduceOp::kAmin, ReduceOp::kProd};

// A view of part of a problem (some of its rows, columns or outer slices) and which of the
// whole's `total` outputs it computes: [first, first + count).
struct InvariancePart {
  TensorView view;
  int64_t first, count;
  std::string what;
};

// Every kInvarianceOps op over `dim` of the float32 tensor x: two runs give the same bits, and
// each part alone gives the bits of the same outputs of the whole.
void expect_deterministic_and_invariant(const TensorView& x, int64_t dim, int64_t total,
                                        const std::vector<InvariancePart>& parts) {
  for (ReduceOp op : kInvarianceOps) {
    SCOPED_TRACE(reduce_op_name(op));
    const auto whole = output_bits<float>(op, x, DimList::of(&dim, 1));
    EXPECT_EQ(whole, output_bits<float>(op, x, DimList::of(&dim, 1))) << "two runs differ";
    for (const InvariancePart& p : parts)
      EXPECT_EQ(output_bits<float>(op, p.view, DimList::of(&dim, 1)),
                slice_bits(whole, p.first, p.count, total, has_mean(op)))
          << p.what << " alone differ from the same outputs of the whole";
  }
}

// row_warp_max_vectors moves rows between the warp kernel and the block kernel: every op matches
// the oracle either way (rows of up to 40009 values on 32 lanes, short rows on a whole CTA), for
// aligned rows and shifted ones. Planner test RowWarpKnobPicksTheRowKernel: they plan so.
TEST_F(ReduceGpu, RowsOnEitherKernelByTheWarpKnob) {
  {
    const ScopedTuning warp("row_warp_max_vectors", int64_t(1) << 20);
    for (int64_t n : {4096, 4099, 40009}) check_case<float>(rows(7, n));
    check_case<float>(rows(7, 4096, "near_one+special", 1, 1));
    check_case<__nv_bfloat16>(rows(5, 40009, "special", 1, 1));
  }
  const ScopedTuning block("row_warp_max_vectors", 0);
  for (int64_t n : {1, 33, 781}) check_case<float>(rows(9, n));
  check_case<__nv_bfloat16>(rows(9, 33, "special", 1, 1));
}

TEST_F(ReduceGpu, RowsAreDeterministicAndBatchInvariant) {
  for (int64_t n : {1000, 4096, 100003}) {
    const int64_t m = n > 50000 ? 12 : 600;
    SCOPED_TRACE(testing::Message() << "rows of " << n);
    const Layout l{{m, n}};
    const DeviceBuffer buf(physical_image<float>(make_logical<float>(m * n, "randn", 3), l));
    const TensorView x = device_view(buf.get(), DType::kFloat32, l);
    std::vector<InvariancePart> parts;
    for (int64_t r : {int64_t(0), m / 2 + 1, m - 1}) {
      TensorView alone = x;
      alone.sizes[0] = 1;
      alone.data = static_cast<float*>(buf.get()) + r * n;
      parts.push_back({alone, r, 1, "row " + std::to_string(r)});
    }
    expect_deterministic_and_invariant(x, -1, m, parts);
  }
}

TEST_F(ReduceGpu, ColumnsAreDeterministicAndBatchInvariant) {
  // 20000 columns run one CTA per (tile, group of segments); a 64-column slice (aligned or not)
  // runs one CTA per segment, and a single column is a column problem of inner extent 1: all must
  // give the same bits (2600 rows: 11 segments, not a multiple of the 8 groups; 40 rows: short
  // columns, a lane each).
  for (const int64_t k : {int64_t(2600), int64_t(40)}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const int64_t n = 20000;
    const Layout l{{k, n}};
    const DeviceBuffer buf(physical_image<float>(make_logical<float>(k * n, "randn", 4), l));
    const TensorView x = device_view(buf.get(), DType::kFloat32, l);
    std::vector<InvariancePart> parts;
    for (int64_t width : {int64_t(64), int64_t(1)}) {
      for (int64_t first : {int64_t(0), int64_t(4096), int64_t(7777)}) {
        TensorView part = x;
        part.sizes[1] = width;
        part.data = static_cast<float*>(buf.get()) + first;
        parts.push_back({part, first, width, "columns " + std::to_string(first) + "..+" + std::to_string(width)});
      }
    }
    expect_deterministic_and_invariant(x, 0, n, parts);
  }
}

TEST_F(ReduceGpu, ColumnsAreBatchInvariantAcrossEveryWorkSplit) {
  // [520, 2100, 32] reduced over dim 1 (9 segments): 520 outer slices run one CTA per tile; one
  // outer slice alone (or 100 of them) runs one CTA per segment. Same bits either way.
  const int64_t outer = 520, k = 2100, n = 32;
  const Layout l{{outer, k, n}};
  const DeviceBuffer buf(physical_image<float>(make_logical<float>(outer * k * n, "randn", 6), l));
  const TensorView x = device_view(buf.get(), DType::kFloat32, l);
  std::vector<InvariancePart> parts;
  for (int64_t first : {int64_t(0), int64_t(333), int64_t(419)}) {
    for (int64_t count : {int64_t(1), int64_t(100)}) {
      TensorView part = x;
      part.sizes[0] = count;
      part.data = static_cast<float*>(buf.get()) + first * k * n;
      parts.push_back({part, first * n, count * n,
                       "outer slices " + std::to_string(first) + "..+" + std::to_string(count)});
    }
  }
  expect_deterministic_and_invariant(x, 1, outer * n, parts);
}

// The wide column layout (ReduceConfig::column_wide, forced by its knob) changes no bits: every
// op over columns run one CTA per tile (a middle dim of 70 over 128 x 512), per group of segments
// (16384 columns), per segment (136 and 4104 columns, the latter not a whole number of wide
// tiles) and another middle dim, in float32 (ops whose statistics do not fit the wide layout run
// the usual kernel either way; 16-bit, float64 and shifted rows never take it). Planner test
// ColumnWideLayoutByTheInnerExtent: these problems plan it, each way.
TEST_F(ReduceGpu, WideColumnLayoutGivesTheSameBits) {
  using T = float;
  for (const Case& c : {Case{Layout{{128, 70, 512}}, false, {1}, false, "randn"}, columns(2600, 16384),
                        columns(4096, 136), columns(700, 4104, "special"),
                        Case{Layout{{37, 1000, 300}}, false, {1}, false, "randn"}}) {
    SCOPED_TRACE(describe(c));
    const std::vector<double> logical = make_logical<T>(reference::numel(c.layout.shape), c.values, 8);
    const DeviceBuffer buf(physical_image<T>(logical, c.layout));
    const TensorView x = device_view(buf.get(), dtype_of<T>(), c.layout);
    for (ReduceOp op : kAllOps) {
      SCOPED_TRACE(reduce_op_name(op));
      std::vector<unsigned char> narrow;
      {
        const ScopedTuning never("col_wide_from_columns", 0);
        narrow = output_bits<T>(op, x, dim_list(c));
      }
      const ScopedTuning wide("col_wide_from_columns", 1);
      EXPECT_EQ(output_bits<T>(op, x, dim_list(c)), narrow) << "the wide layout changed the bits";
    }
  }
}

TEST_F(ReduceGpu, TicketsApartFromTheWorkspace) {
  // Workspace::tickets: one zeroed ticket buffer serves call after call (the PyTorch layer keeps
  // one per stream); results equal the plain workspace's bit for bit and the tickets stay zero.
  DeviceBuffer tickets(1 << 16);
  REDUCEKIT_CUDA_OK(cudaMemset(tickets.get(), 0, 1 << 16));
  for (const Case& c : {columns(4099, 5), rows(3, 100003), everything({(1 << 20) + 3})}) {
    SCOPED_TRACE(describe(c));
    const std::vector<double> logical = make_logical<float>(reference::numel(c.layout.shape), "randn", 5);
    const DeviceBuffer buf(physical_image<float>(logical, c.layout));
    const TensorView x = device_view(buf.get(), DType::kFloat32, c.layout);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kVarMean, ReduceOp::kArgmax}) {
      SCOPED_TRACE(reduce_op_name(op));
      const auto want = output_bits<float>(op, x, dim_list(c));
      ReduceRequirements req;
      ASSERT_TRUE(reduce_requirements(op, x, dim_list(c), false, &req).is_ok());
      ASSERT_GT(req.workspace_zeroed_bytes, 0u);
      int64_t n = 1;
      for (int d = 0; d < req.out_rank; ++d) n *= req.out_sizes[d];
      const DType out_type = op == ReduceOp::kArgmax ? DType::kInt64 : DType::kFloat32;
      DeviceBuffer out(n * 8), mean(n * 8), partials(req.workspace_bytes - req.workspace_zeroed_bytes);
      const TensorView ov = output_view(req, out.get(), out_type);
      const TensorView mv = output_view(req, mean.get(), DType::kFloat32);
      Workspace ws{partials.get(), partials.bytes(), tickets.get(), 1 << 16};
      for (int run = 0; run < 2; ++run) {
        ASSERT_TRUE(reduce(op, x, dim_list(c), false, 1.0, ov, mv, ws, nullptr).is_ok());
        REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got_f(op == ReduceOp::kArgmax ? 0 : n), got_m(op == ReduceOp::kVarMean ? n : 0);
        std::vector<int64_t> got_i(op == ReduceOp::kArgmax ? n : 0);
        std::vector<unsigned char> bits;
        auto append = [&](const void* p, std::size_t count) {
          const auto* b = static_cast<const unsigned char*>(p);
          bits.insert(bits.end(), b, b + count);
        };
        if (op == ReduceOp::kArgmax) {
          REDUCEKIT_CUDA_OK(cudaMemcpy(got_i.data(), out.get(), n * 8, cudaMemcpyDeviceToHost));
          append(got_i.data(), n * 8);
        } else {
          REDUCEKIT_CUDA_OK(cudaMemcpy(got_f.data(), out.get(), n * 4, cudaMemcpyDeviceToHost));
          std::vector<double> d(got_f.begin(), got_f.end());
          if (op == ReduceOp::kVarMean) {
            REDUCEKIT_CUDA_OK(cudaMemcpy(got_m.data(), mean.get(), n * 4, cudaMemcpyDeviceToHost));
            d.insert(d.end(), got_m.begin(), got_m.end());
          }
          append(d.data(), d.size() * sizeof(double));
        }
        EXPECT_EQ(bits, want) << "run " << run;
      }
      std::vector<unsigned char> t(1 << 16);
      REDUCEKIT_CUDA_OK(cudaMemcpy(t.data(), tickets.get(), t.size(), cudaMemcpyDeviceToHost));
      EXPECT_TRUE(std::all_of(t.begin(), t.end(), [](unsigned char b) { return b == 0; })) << "tickets not left zero";
      // Too few ticket bytes is an error naming the workspace.
      ws.ticket_bytes = req.workspace_zeroed_bytes - 1;
      const Status short_tickets = reduce(op, x, dim_list(c), false, 1.0, ov, mv, ws, nullptr);
      EXPECT_EQ(short_tickets.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(short_tickets.message().rfind("workspace:", 0), 0u) << short_tickets.message();
    }
  }
}

TEST_F(ReduceGpu, AllIsDeterministic) {
  const int64_t n = (1 << 22) + 17;
  const std::vector<double> logical = make_logical<__nv_bfloat16>(n, "randn", 8);
  const std::vector<__nv_bfloat16> image = physical_image<__nv_bfloat16>(logical, Layout{{n}});
  DeviceBuffer buf(image.size() * 2);
  REDUCEKIT_CUDA_OK(cudaMemcpy(buf.get(), image.data(), image.size() * 2, cudaMemcpyHostToDevice));
  const TensorView x = device_view(buf.get(), DType::kBFloat16, Layout{{n}});
  for (ReduceOp op : kInvarianceOps)
    EXPECT_EQ(output_bits<__nv_bfloat16>(op, x, DimList::every()), output_bits<__nv_bfloat16>(op, x, DimList::every()))
        << reduce_op_name(op);
}

// ---- bad input: a Status naming the argument, nothing written -------------------------------------

void expect_error(const Status& s, StatusCode code, const std::string& prefix, const std::string& contains = "") {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << s.message();
  if (!contains.empty()) EXPECT_NE(s.message().find(contains), std::string::npos) << s.message();
}

TEST(ReduceErrors, RejectsHostAndIntegerInputWithoutTouchingMemory) {
  float host_x[12] = {};
  float host_out[3] = {7, 7, 7};
  const int64_t dim = 1;
  const TensorView out = make_contiguous_view(host_out, DType::kFloat32, {3}, kHostDevice);
  expect_error(sum(make_contiguous_view(host_x, DType::kFloat32, {3, 4}, kHostDevice), DimList::of(&dim, 1), false,
                   out, {}, nullptr),
               StatusCode::kInvalidArgument, "x:", "CUDA");
  int64_t ints[12] = {};
  expect_error(amax(make_contiguous_view(ints, DType::kInt64, {3, 4}, 0), DimList::of(&dim, 1), false, out, {}, nullptr),
               StatusCode::kInvalidArgument, "x:");
  for (float v : host_out) EXPECT_EQ(v, 7.0f);
}

TEST_F(ReduceGpu, RejectsBadArgumentsWithoutWriting) {
  DeviceBuffer x(4 * 8 * 4), out(256), ws(1 << 20);
  REDUCEKIT_CUDA_OK(cudaMemset(out.get(), 0x5a, 256));
  const TensorView xv = make_contiguous_view(x.get(), DType::kFloat32, {4, 8}, 0);
  const TensorView ov = make_contiguous_view(out.get(), DType::kFloat32, {4}, 0);
  const Workspace w{ws.get(), 1 << 20};
  const int64_t bad[] = {2}, twice[] = {1, -1}, good[] = {1};
  expect_error(sum(xv, DimList::of(bad, 1), false, ov, w, nullptr), StatusCode::kInvalidArgument, "dim:", "out of range");
  expect_error(mean(xv, DimList::of(twice, 2), false, ov, w, nullptr), StatusCode::kInvalidArgument, "dim:", "twice");
  TensorView wrong_shape = ov;
  wrong_shape.sizes[0] = 8;
  expect_error(sum(xv, DimList::of(good, 1), false, wrong_shape, w, nullptr), StatusCode::kInvalidArgument, "out:",
               "shape");
  expect_error(sum(xv, DimList::of(good, 1), true, ov, w, nullptr), StatusCode::kInvalidArgument, "out:", "[4, 1]");
  TensorView wrong_type = ov;
  wrong_type.dtype = DType::kFloat16;
  expect_error(amax(xv, DimList::of(good, 1), false, wrong_type, w, nullptr), StatusCode::kInvalidArgument, "out:",
               "dtype");
  expect_error(argmax(xv, DimList::of(good, 1), false, ov, w, nullptr), StatusCode::kInvalidArgument, "out:", "int64");
  TensorView strided = ov;
  strided.strides[0] = 2;
  expect_error(var(xv, DimList::of(good, 1), 1, false, strided, w, nullptr), StatusCode::kInvalidArgument, "out:",
               "contiguous");
  TensorView inside_x = ov;
  inside_x.data = x.get();
  expect_error(sum(xv, DimList::of(good, 1), false, inside_x, w, nullptr), StatusCode::kInvalidArgument, "out:");
  expect_error(var_mean(xv, DimList::of(good, 1), 1, false, ov, ov, w, nullptr), StatusCode::kInvalidArgument,
               "mean_out:");
  // an empty set has no maximum: the error names the dim
  const TensorView empty = make_contiguous_view(x.get(), DType::kFloat32, {4, 0}, 0);
  expect_error(amax(empty, DimList::of(good, 1), false, ov, w, nullptr), StatusCode::kInvalidArgument, "dim:", "dim 1");
  expect_error(argmin(empty, DimList::every(), false, make_contiguous_view(out.get(), DType::kInt64, {}, 0), w, nullptr),
               StatusCode::kInvalidArgument, "dim:", "size 0");
  // a workspace too small for a chunked problem
  DeviceBuffer big(int64_t(4) * 300000 * 4);
  const TensorView long_rows = make_contiguous_view(big.get(), DType::kFloat32, {4, 300000}, 0);
  ReduceRequirements req;
  ASSERT_TRUE(reduce_requirements(ReduceOp::kSum, long_rows, DimList::of(good, 1), false, &req).is_ok());
  ASSERT_GT(req.workspace_bytes, 0u);
  expect_error(sum(long_rows, DimList::of(good, 1), false, ov, Workspace{ws.get(), req.workspace_bytes - 1}, nullptr),
               StatusCode::kInvalidArgument, "workspace:");
  expect_error(sum(long_rows, DimList::of(good, 1), false, ov, Workspace{}, nullptr), StatusCode::kInvalidArgument,
               "workspace:");
  // a layout that needs the binding's copy
  const TensorView cube = make_contiguous_view(x.get(), DType::kFloat32, {2, 4, 4}, 0);
  const int64_t outer_dims[] = {0, 2};
  ASSERT_TRUE(reduce_requirements(ReduceOp::kSum, cube, DimList::of(outer_dims, 2), false, &req).is_ok());
  EXPECT_TRUE(req.needs_copy);
  EXPECT_EQ(std::vector<int>(req.permutation, req.permutation + 3), (std::vector<int>{1, 0, 2}));
  expect_error(sum(cube, DimList::of(outer_dims, 2), false, ov, w, nullptr), StatusCode::kUnsupported, "x:");

  std::vector<unsigned char> after(256);
  REDUCEKIT_CUDA_OK(cudaMemcpy(after.data(), out.get(), 256, cudaMemcpyDeviceToHost));
  for (unsigned char b : after) ASSERT_EQ(b, 0x5a) << "a rejected call wrote to out";
}

TEST_F(ReduceGpu, NamedEntryPointsMatchTheGenericOne) {
  const Layout l{{6, 50}};
  const std::vector<double> logical = make_logical<float>(300, "randn", 2);
  const std::vector<float> image = physical_image<float>(logical, l);
  DeviceBuffer x(1200), a(64), b(64), m(64);
  REDUCEKIT_CUDA_OK(cudaMemcpy(x.get(), image.data(), 1200, cudaMemcpyHostToDevice));
  const TensorView xv = device_view(x.get(), DType::kFloat32, l);
  const TensorView av = make_contiguous_view(a.get(), DType::kFloat32, {6}, 0);
  const TensorView bv = make_contiguous_view(b.get(), DType::kFloat32, {6}, 0);
  const TensorView mv = make_contiguous_view(m.get(), DType::kFloat32, {6}, 0);
  const int64_t dim = 1;
  const DimList d = DimList::of(&dim, 1);
  auto same = [&](const char* what) {
    std::vector<float> ha(6), hb(6);
    REDUCEKIT_CUDA_OK(cudaMemcpy(ha.data(), a.get(), 24, cudaMemcpyDeviceToHost));
    REDUCEKIT_CUDA_OK(cudaMemcpy(hb.data(), b.get(), 24, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(ha.data(), hb.data(), 24), 0) << what;
  };
  ASSERT_TRUE(std(xv, d, 0.5, false, av, {}, nullptr).is_ok());
  ASSERT_TRUE(std_mean(xv, d, 0.5, false, bv, mv, {}, nullptr).is_ok());
  same("std vs std_mean");
  ASSERT_TRUE(logsumexp(xv, d, false, av, {}, nullptr).is_ok());
  ASSERT_TRUE(reduce(ReduceOp::kLogsumexp, xv, d, false, 0, bv, {}, {}, nullptr).is_ok());
  same("logsumexp");
  ASSERT_TRUE(prod(xv, d, false, av, {}, nullptr).is_ok());
  ASSERT_TRUE(reduce(ReduceOp::kProd, xv, d, false, 0, bv, {}, {}, nullptr).is_ok());
  same("prod");
}

}  // namespace
}  // namespace reducekit
