// SPDX-License-Identifier: Apache-2.0
// GPU tests of the softmax family over a non-innermost dim of dense tensors (the column path,
// kernels/softmax_columns.cuh) against the float64 CPU oracle: [outer, K, inner] over dim 1.
// Outputs are poisoned with NaN, and guard elements past the tensor must keep the poison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "softmax_test_ops.hpp"
#include "plan/softmax_column_plan.hpp"
#include "reducekit/softmax.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

using namespace softmax_test;

struct Columns {
  int64_t outer, k, inner;
  int64_t numel() const { return outer * k * inner; }
};

// A dense [outer, K, inner] view `offset` elements into a device buffer.
TensorView column_view(void* base, DType dtype, const Columns& c, int64_t offset) {
  TensorView v;
  v.data = static_cast<char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
  v.dtype = dtype;
  v.rank = 3;
  v.sizes[0] = c.outer;
  v.sizes[1] = c.k;
  v.sizes[2] = c.inner;
  v.strides[0] = c.k * c.inner;
  v.strides[1] = c.inner;
  v.strides[2] = 1;
  v.device = 0;
  return v;
}

// randn ("large": 1e4 * randn); "special" also gets, where the columns exist: column 0 of slab 0
// all -inf, column 1 constant, columns 2, 3, 4 one +inf, one NaN and one -inf.
std::vector<double> make_columns(const Columns& c, const std::string& kind, uint32_t seed) {
  std::vector<double> v = make_values(c.numel(), kind == "large" ? "large" : "randn", seed);
  if (kind == "special") {
    const double inf = std::numeric_limits<double>::infinity();
    auto at = [&](int64_t k, int64_t i) -> double& { return v[k * c.inner + i]; };
    for (int64_t k = 0; k < c.k; ++k) {
      at(k, 0) = -inf;
      if (c.inner > 1) at(k, 1) = 3.5;
    }
    if (c.inner > 2) at(c.k / 2, 2) = inf;
    if (c.inner > 3) at(c.k - 1, 3) = std::numeric_limits<double>::quiet_NaN();
    if (c.inner > 4) at(0, 4) = -inf;
  }
  return v;
}

template <typename T> std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_double(from_double<T>(v[i]));
  return r;
}

bool oracle(Op op, const double* a, const double* b, double* out, const Columns& c) {
  const reference::Shape shape = {c.outer, c.k, c.inner};
  switch (op) {
    case Op::kSoftmax: return reference::softmax_dim(a, out, shape, 1);
    case Op::kLogSoftmax: return reference::log_softmax_dim(a, out, shape, 1);
    case Op::kSoftmaxBackward: return reference::softmax_backward_dim(a, b, out, shape, 1);
    default: return reference::log_softmax_backward_dim(a, b, out, shape, 1);
  }
}

// The magnitude of the terms behind a column's outputs (see close_enough in gpu_test_util.hpp).
double column_scale(Op op, const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& want,
                    const Columns& c, int64_t o, int64_t i) {
  auto idx = [&](int64_t k) { return (o * c.k + k) * c.inner + i; };
  double scale = 0, sum_abs = 0;
  if (!is_backward(op)) {
    for (int64_t k = 0; k < c.k; ++k)
      if (std::isfinite(want[idx(k)])) scale = std::max(scale, std::fabs(want[idx(k)]));
    return scale;
  }
  for (int64_t k = 0; k < c.k; ++k)
    sum_abs += op == Op::kSoftmaxBackward ? std::fabs(a[idx(k)] * b[idx(k)]) : std::fabs(b[idx(k)]);
  for (int64_t k = 0; k < c.k; ++k) {
    const double t = op == Op::kSoftmaxBackward ? std::fabs(a[idx(k)]) * (std::fabs(b[idx(k)]) + sum_abs)
                                                : std::fabs(b[idx(k)]) + std::exp(a[idx(k)]) * sum_abs;
    if (std::isfinite(t)) scale = std::max(scale, t);
  }
  return scale;
}

// Runs `op` over dim 1 of [outer, K, inner], every tensor `offset` elements into its buffer,
// and compares with the oracle.
template <typename T> void check_columns(Op op, const Columns& c, int64_t offset, const std::string& kind, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()) << " [" << c.outer << ", " << c.k
                                  << ", " << c.inner << "] offset=" << offset << " values=" << kind);
  const DType dtype = dtype_of<T>();
  const std::size_t n = static_cast<std::size_t>(c.numel());
  const T poison = from_double<T>(std::numeric_limits<double>::quiet_NaN());

  std::vector<double> a = rounded<T>(make_columns(c, kind, seed)), b, want(n);
  if (is_backward(op)) {
    std::vector<double> y(n);
    const reference::Shape shape = {c.outer, c.k, c.inner};
    ASSERT_TRUE(op == Op::kSoftmaxBackward ? reference::softmax_dim(a.data(), y.data(), shape, 1)
                                           : reference::log_softmax_dim(a.data(), y.data(), shape, 1));
    a = rounded<T>(y);
    b = rounded<T>(make_values(c.numel(), "randn", seed + 1));
  }
  ASSERT_TRUE(oracle(op, a.data(), b.data(), want.data(), c));

  const std::size_t slots = n + offset + 64;  // 64 guard elements
  std::vector<T> ha(slots, T(0)), hb(slots, T(0)), out_image(slots, poison);
  for (std::size_t e = 0; e < n; ++e) {
    ha[offset + e] = from_double<T>(a[e]);
    if (is_backward(op)) hb[offset + e] = from_double<T>(b[e]);
  }
  DeviceBuffer da(ha), db(hb), dout(out_image);
  ASSERT_TRUE(da.get() && db.get() && dout.get());
  const Status s = run(op, column_view(da.get(), dtype, c, offset), column_view(db.get(), dtype, c, offset),
                       column_view(dout.get(), dtype, c, offset));
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  std::vector<T> got(slots);
  REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), dout.get(), slots * sizeof(T), cudaMemcpyDeviceToHost));

  int failures = 0;
  for (std::size_t e = 0; e < slots && failures < 5; ++e) {
    const bool inside = e >= static_cast<std::size_t>(offset) && e < offset + n;
    if (!inside && std::memcmp(&got[e], &poison, sizeof(T)) != 0) {
      ADD_FAILURE() << "element " << e << " outside the tensor was written";
      ++failures;
    }
  }
  for (int64_t o = 0; o < c.outer && failures < 5; ++o)
    for (int64_t i = 0; i < c.inner && failures < 5; ++i) {
      const double scale = column_scale(op, a, b, want, c, o, i);
      for (int64_t k = 0; k < c.k && failures < 5; ++k) {
        const std::size_t e = static_cast<std::size_t>((o * c.k + k) * c.inner + i);
        const double g = to_double(got[offset + e]);
        if (!close_enough<T>(g, want[e], scale)) {
          ADD_FAILURE() << "outer " << o << " k " << k << " inner " << i << ": got " << g << ", want " << want[e];
          ++failures;
        }
      }
    }
}

const std::vector<int64_t> kColumnKs = {1, 2, 7, 150, 1000, 5000};
const std::vector<int64_t> kInners = {1, 3, 8, 64, 1001, 16384};

// Every (K, inner) pair of up to 6M elements a slab (the oracle runs on the CPU), 1-3 slabs.
template <typename T> void sweep(Op op) {
  for (int64_t k : kColumnKs)
    for (int64_t inner : kInners) {
      if (k * inner > (int64_t(6) << 20)) continue;
      const int64_t outer = std::clamp<int64_t>((int64_t(1) << 20) / (k * inner), 1, 3);
      check_columns<T>(op, {outer, k, inner}, 0, "randn", 1);
      check_columns<T>(op, {outer, k, inner}, 1, "special", 2);  // every base pointer one element off
      if (!is_backward(op)) check_columns<T>(op, {outer, k, inner}, 0, "large", 3);
      if (::testing::Test::HasFailure()) return;  // one bad shape is enough
    }
}

class SoftmaxColumnsGpu : public ::testing::Test {
 protected:
  void SetUp() override { REDUCEKIT_REQUIRE_GPU(); }
};

#define REDUCEKIT_COLUMN_DTYPE_TESTS(NAME, OP)                              \
  TEST_F(SoftmaxColumnsGpu, NAME##Float32) { sweep<float>(OP); }            \
  TEST_F(SoftmaxColumnsGpu, NAME##Float16) { sweep<__half>(OP); }           \
  TEST_F(SoftmaxColumnsGpu, NAME##BFloat16) { sweep<__nv_bfloat16>(OP); }   \
  TEST_F(SoftmaxColumnsGpu, NAME##Float64) { sweep<double>(OP); }

REDUCEKIT_COLUMN_DTYPE_TESTS(Softmax, Op::kSoftmax)
REDUCEKIT_COLUMN_DTYPE_TESTS(LogSoftmax, Op::kLogSoftmax)
REDUCEKIT_COLUMN_DTYPE_TESTS(SoftmaxBackward, Op::kSoftmaxBackward)
REDUCEKIT_COLUMN_DTYPE_TESTS(LogSoftmaxBackward, Op::kLogSoftmaxBackward)

// The output bits of `op` over dim 1 of c, read from `a` (and `b`) `offset` elements in.
template <typename T>
std::vector<T> output_bits(Op op, const DeviceBuffer& a, const DeviceBuffer& b, const Columns& c, int64_t offset) {
  DeviceBuffer out(static_cast<std::size_t>(c.numel()) * sizeof(T));
  EXPECT_EQ(cudaMemset(out.get(), 0xff, out.bytes()), cudaSuccess);
  const DType dtype = dtype_of<T>();
  const Status s =
      run(op, column_view(a.get(), dtype, c, offset), column_view(b.get(), dtype, c, offset), column_view(out.get(), dtype, c, 0));
  EXPECT_TRUE(s.is_ok()) << s.message();
  std::vector<T> host(static_cast<std::size_t>(c.numel()));
  EXPECT_EQ(cudaMemcpy(host.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

template <typename T> void determinism_and_batch_invariance(Op op) {
  // Staged (K = 150, 1000) and two-read (K = 5000) tiles; inner 1001 puts slab starts off 16 bytes.
  for (const Columns c : {Columns{6, 150, 1001}, Columns{4, 1000, 4096}, Columns{3, 5000, 1001}}) {
    SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()) << " [" << c.outer << ", "
                                    << c.k << ", " << c.inner << "]");
    std::vector<double> va = make_values(c.numel(), "randn", 5), vb = make_values(c.numel(), "randn", 6);
    if (is_backward(op)) {
      std::vector<double> y(va.size());
      reference::softmax_dim(va.data(), y.data(), {c.outer, c.k, c.inner}, 1);
      va = y;
    }
    std::vector<T> ha(va.size()), hb(vb.size());
    for (std::size_t e = 0; e < va.size(); ++e) {
      ha[e] = from_double<T>(va[e]);
      hb[e] = from_double<T>(vb[e]);
    }
    DeviceBuffer a(ha), b(hb);
    ASSERT_TRUE(a.get() && b.get());
    const std::vector<T> batch = output_bits<T>(op, a, b, c, 0);
    const std::vector<T> again = output_bits<T>(op, a, b, c, 0);
    EXPECT_EQ(std::memcmp(batch.data(), again.data(), batch.size() * sizeof(T)), 0) << "two runs differ";
    const int64_t slab = c.k * c.inner;
    for (int64_t o : {int64_t(0), c.outer - 1}) {
      const std::vector<T> alone = output_bits<T>(op, a, b, {1, c.k, c.inner}, o * slab);
      EXPECT_EQ(std::memcmp(alone.data(), batch.data() + o * slab, alone.size() * sizeof(T)), 0)
          << "slab " << o << " alone differs from the same slab in the batch";
    }
  }
}

TEST_F(SoftmaxColumnsGpu, DeterministicAndBatchInvariantFloat32) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kSoftmaxBackward, Op::kLogSoftmaxBackward})
    determinism_and_batch_invariance<float>(op);
}
TEST_F(SoftmaxColumnsGpu, DeterministicAndBatchInvariantBFloat16) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmaxBackward}) determinism_and_batch_invariance<__nv_bfloat16>(op);
}
TEST_F(SoftmaxColumnsGpu, DeterministicAndBatchInvariantFloat64) {
  for (Op op : {Op::kLogSoftmax, Op::kSoftmaxBackward}) determinism_and_batch_invariance<double>(op);
}

// Two staged tile buffers on resident CTAs (column_stage_buffers=2 takes them wherever they fit,
// =1 never) move bytes differently, never the arithmetic: the same output bits as one tile a CTA, with several tiles a
// CTA (more tiles than resident CTAs), aligned and one element off; and right against the oracle.
int device_smem_optin() {
  int smem = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  return smem;
}

template <typename T> void two_buffers_change_no_bits(Op op) {
  for (const Columns c : {Columns{64, 150, 1024}, Columns{32, 19, 16384}, Columns{8, 1000, 1024}}) {
    SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()) << " [" << c.outer << ", "
                                    << c.k << ", " << c.inner << "]");
    // The shape must plan two buffers, or both runs below take the same path (statistics and
    // parameters of at most 8 bytes, as every op here has).
    SoftmaxColumnPlan plan;
    ASSERT_TRUE(plan_softmax_columns({c.outer, c.k, c.inner}, sizeof(T), is_backward(op) ? 2 : 1, 8, 8,
                                     static_cast<std::size_t>(device_smem_optin()), &plan)
                    .is_ok());
    ASSERT_EQ(plan.buffers, 2);
    std::vector<double> va = make_values(c.numel(), "randn", 15), vb = make_values(c.numel(), "randn", 16);
    std::vector<T> ha(va.size() + 1), hb(vb.size() + 1);
    for (std::size_t e = 0; e < va.size(); ++e) {
      ha[e + 1] = from_double<T>(va[e]);
      hb[e + 1] = from_double<T>(vb[e]);
    }
    DeviceBuffer a(ha), b(hb);
    ASSERT_TRUE(a.get() && b.get());
    for (const int64_t offset : {0, 1}) {  // 1: every tile staged element by element, one buffer
      std::vector<T> one;
      {
        const ScopedTuning single("column_stage_buffers", 1);
        one = output_bits<T>(op, a, b, c, offset);
      }
      const ScopedTuning two("column_stage_buffers", 2);
      const std::vector<T> both = output_bits<T>(op, a, b, c, offset);
      EXPECT_EQ(std::memcmp(one.data(), both.data(), one.size() * sizeof(T)), 0) << "offset " << offset;
    }
  }
  const ScopedTuning two("column_stage_buffers", 2);
  check_columns<T>(op, {24, 150, 1024}, 0, "special", 17);
}

TEST_F(SoftmaxColumnsGpu, TwoTileBuffersChangeNoBits) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmaxBackward}) {
    two_buffers_change_no_bits<float>(op);
    two_buffers_change_no_bits<__nv_bfloat16>(op);
  }
}

// A K of 4096 staged whole (its 128 KiB tile, one CTA an SM) instead of read twice: right against
// the oracle, aligned and one element off (the staged tiles' statistics are the exact two-phase
// ones, so the bits are not the two-read plan's), and deterministic.
template <typename T> void long_staged_columns(Op op) {
  const Columns c{3, 4096, 256};
  SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()));
  SoftmaxColumnPlan plan;
  ASSERT_TRUE(plan_softmax_columns({c.outer, c.k, c.inner}, sizeof(T), 1, 8, 8,
                                   static_cast<std::size_t>(device_smem_optin()), &plan)
                  .is_ok());
  ASSERT_TRUE(plan.staged) << "the default must stage this K";
  check_columns<T>(op, c, 0, "randn", 19);
  check_columns<T>(op, c, 1, "special", 20);
  std::vector<double> va = make_values(c.numel(), "randn", 18);
  std::vector<T> ha(va.size());
  for (std::size_t e = 0; e < va.size(); ++e) ha[e] = from_double<T>(va[e]);
  DeviceBuffer a(ha);
  ASSERT_TRUE(a.get());
  const std::vector<T> first = output_bits<T>(op, a, a, c, 0), again = output_bits<T>(op, a, a, c, 0);
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(T)), 0);
}

TEST_F(SoftmaxColumnsGpu, LongStagedColumns) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
    long_staged_columns<float>(op);
    long_staged_columns<__nv_bfloat16>(op);
  }
}

// Split tiles: a cluster of CTAs a tile, each a band of K, merging their statistics in rank
// order. Uneven bands (K = 1537 in two, 2049 in four), two to eight CTAs, aligned and one element
// off, against the oracle (two slabs); one tile a cluster or several (two buffers, more tiles than
// resident clusters) give the same bits, and so does the last slab alone.
template <typename T> void split_tiles(Op op, const Columns& c, int split) {
  SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()) << " K=" << c.k);
  SoftmaxColumnPlan plan;
  ASSERT_TRUE(plan_softmax_columns({c.outer, c.k, c.inner}, sizeof(T), is_backward(op) ? 2 : 1, 8, 8,
                                   static_cast<std::size_t>(device_smem_optin()), &plan)
                  .is_ok());
  ASSERT_TRUE(plan.staged);
  ASSERT_EQ(plan.split, split);
  check_columns<T>(op, {2, c.k, c.inner}, 0, "randn", 21);
  check_columns<T>(op, {2, c.k, c.inner}, 1, "special", 22);
  const auto values = [&](uint32_t seed) {
    const std::vector<double> v = make_values(c.numel(), "randn", seed);
    std::vector<T> t(v.size());
    std::transform(v.begin(), v.end(), t.begin(), from_double<T>);
    return t;
  };
  DeviceBuffer a(values(23)), b(values(24));
  ASSERT_TRUE(a.get() && b.get());
  std::vector<T> one;
  {
    const ScopedTuning single("column_stage_buffers", 1);
    one = output_bits<T>(op, a, b, c, 0);
  }
  {
    const ScopedTuning two("column_stage_buffers", 2);
    const std::vector<T> looped = output_bits<T>(op, a, b, c, 0);
    EXPECT_EQ(std::memcmp(one.data(), looped.data(), one.size() * sizeof(T)), 0) << "tiles looped over a cluster";
  }
  const std::vector<T> alone = output_bits<T>(op, a, b, {1, c.k, c.inner}, (c.outer - 1) * c.k * c.inner);
  EXPECT_EQ(std::memcmp(alone.data(), one.data() + (c.outer - 1) * c.k * c.inner, alone.size() * sizeof(T)), 0)
      << "the last slab alone";
}

TEST_F(SoftmaxColumnsGpu, SplitTiles) {
  split_tiles<float>(Op::kSoftmax, {3, 1537, 256}, 2);
  split_tiles<float>(Op::kSoftmax, {3, 2049, 256}, 4);  // 64-byte rows: two bands would pass 64 KiB
  split_tiles<float>(Op::kLogSoftmax, {16, 4096, 256}, 4);
  split_tiles<__nv_bfloat16>(Op::kSoftmax, {16, 4096, 256}, 4);
  split_tiles<__nv_bfloat16>(Op::kLogSoftmax, {2, 12288, 64}, 8);
  split_tiles<double>(Op::kSoftmax, {2, 1999, 64}, 2);
  split_tiles<float>(Op::kSoftmaxBackward, {3, 1600, 256}, 4);
  split_tiles<__nv_bfloat16>(Op::kLogSoftmaxBackward, {3, 5000, 64}, 8);
}

TEST_F(SoftmaxColumnsGpu, InPlace) {
  const Columns c{3, 150, 1000};
  const std::vector<double> values = make_values(c.numel(), "randn", 9);
  std::vector<float> host(values.begin(), values.end()), got(host.size());
  std::vector<double> x(host.begin(), host.end()), want(x.size());
  reference::softmax_dim(x.data(), want.data(), {c.outer, c.k, c.inner}, 1);
  DeviceBuffer d(host);
  ASSERT_TRUE(d.get());
  const TensorView v = column_view(d.get(), DType::kFloat32, c, 0);
  ASSERT_TRUE(softmax(v, v, 1, nullptr).is_ok());
  REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), d.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(close_enough<float>(got[i], want[i], 1.0)) << i;
}

TEST_F(SoftmaxColumnsGpu, NeedsNoWorkspace) {
  DeviceBuffer x(4 * 150 * 1000 * sizeof(float));
  SoftmaxRequirements req;
  req.workspace_bytes = 1;
  ASSERT_TRUE(softmax_requirements(column_view(x.get(), DType::kFloat32, {4, 150, 1000}, 0), 1, &req).is_ok());
  EXPECT_EQ(req.workspace_bytes, 0u);
  EXPECT_EQ(req.workspace_zeroed_bytes, 0u);
}

// A few long columns (one CTA) still run on the column kernels: no copy whose bits would depend
// on how many columns there are.
TEST_F(SoftmaxColumnsGpu, FewLongColumnsRunInPlace) {
  check_columns<float>(Op::kSoftmax, {1, 1 << 18, 4}, 0, "randn", 5);
  check_columns<__nv_bfloat16>(Op::kLogSoftmaxBackward, {1, 1 << 17, 8}, 1, "randn", 6);
}

TEST_F(SoftmaxColumnsGpu, MismatchedTensorsNameTheArgument) {
  DeviceBuffer a(4 * 7 * 8 * 4), b(4 * 7 * 8 * 4), out(4 * 7 * 8 * 4);
  const Columns c{4, 7, 8};
  const TensorView av = column_view(a.get(), DType::kFloat32, c, 0), outv = column_view(out.get(), DType::kFloat32, c, 0);
  TensorView dy = column_view(b.get(), DType::kFloat32, {4, 7, 4}, 0);
  Status s = softmax_backward(av, dy, outv, 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("dy:", 0), 0u) << s.message();
  TensorView half = column_view(out.get(), DType::kFloat16, c, 0);
  s = log_softmax(av, half, 1, nullptr);
  EXPECT_EQ(s.message().rfind("y:", 0), 0u) << s.message();
  s = softmax(av, outv, 3, nullptr);
  EXPECT_EQ(s.message().rfind("dim:", 0), 0u) << s.message();
}

}  // namespace
}  // namespace reducekit
