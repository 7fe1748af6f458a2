// SPDX-License-Identifier: Apache-2.0
// GPU tests of layer_norm / rms_norm (forward, fused residual add, backward) against the float64
// CPU oracle. Outputs are poisoned with NaN before each run; the gaps between strided rows and a
// guard past the end must still hold the poison after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "plan/norm_backward_plan.hpp"
#include "reducekit/norm.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorView dense_view(void* data, DType dtype, std::initializer_list<int64_t> sizes) {
  return make_contiguous_view(data, dtype, sizes, 0);
}

template <typename T> std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = to_double(from_double<T>(x));
  return v;
}

// A device buffer holding `dense` ([rows, cols]) at the layout's places, the rest `filler`;
// 64 guard elements follow the span.
template <typename T> struct Strided {
  Strided(const std::vector<double>& dense, const RowLayout& l, double filler)
      : layout(l), buffer((l.span() + 64) * sizeof(T)) {
    std::vector<T> image(static_cast<std::size_t>(l.span() + 64), from_double<T>(filler));
    for (int64_t r = 0; r < l.rows; ++r)
      for (int64_t c = 0; c < l.cols; ++c) image[l.offset + r * l.stride + c] = from_double<T>(dense[r * l.cols + c]);
    EXPECT_EQ(cudaMemcpy(buffer.get(), image.data(), image.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  TensorView view() const { return row_view(buffer.get(), dtype_of<T>(), layout); }
  std::vector<T> image() const {
    std::vector<T> out(buffer.bytes() / sizeof(T));
    EXPECT_EQ(cudaMemcpy(out.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  // Element (r, c), and whether every element outside the rows still holds the poison.
  double at(const std::vector<T>& image, int64_t r, int64_t c) const {
    return to_double(image[layout.offset + r * layout.stride + c]);
  }
  bool outside_untouched(const std::vector<T>& image) const {
    std::vector<char> inside(image.size(), 0);
    for (int64_t r = 0; r < layout.rows; ++r) std::fill_n(inside.begin() + layout.offset + r * layout.stride, layout.cols, 1);
    for (std::size_t i = 0; i < image.size(); ++i)
      if (!inside[i] && !std::isnan(to_double(image[i]))) return false;
    return true;
  }
  RowLayout layout;
  DeviceBuffer buffer;
};

template <typename A> std::vector<A> download(const DeviceBuffer& b, std::size_t n) {
  std::vector<A> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), b.get(), n * sizeof(A), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}
template <typename A> void upload(const DeviceBuffer& b, const std::vector<A>& v) {
  EXPECT_EQ(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(A), cudaMemcpyHostToDevice), cudaSuccess);
}
template <typename A> std::vector<A> cast_to(const std::vector<double>& v) {
  std::vector<A> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_double<A>(v[i]);
  return out;
}

enum class Kind { kLayer, kRms };

struct Case {
  Kind kind;
  bool residual = false;
  bool weight = true;
  bool bias = true;
  std::string values = "randn";  // "randn", "large_mean" (1e3 + randn), "constant" rows mixed in,
                                 // "step" (a row's first 2048 values 50 higher)
  bool split = false;  // with the workspace *_requirements asks for; the rows must split
};

// x values by kind; every third row constant (variance 0) for "constant". "step" sets a
// streamed layer_norm row's first tile (one vector a thread of 512) apart from the rest: the
// shift its sums of deviations take is then several standard deviations from the mean.
std::vector<double> make_x(int64_t rows, int64_t cols, const std::string& kind, uint32_t seed) {
  std::vector<double> v = make_values(rows * cols, "randn", seed);
  if (kind == "large_mean")
    for (double& x : v) x += 1e3;
  if (kind == "constant")
    for (int64_t r = 0; r < rows; r += 3) std::fill_n(v.begin() + r * cols, cols, 0.375 * (r + 1));
  if (kind == "step")
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < std::min<int64_t>(cols, 2048); ++j) v[r * cols + j] += 50.0;
  return v;
}

// Forward of `c` for T (x) and P (weight/bias) over layout l against the oracle.
template <typename T, typename P> void check_forward(const Case& c, const RowLayout& l, uint32_t seed) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool layer = c.kind == Kind::kLayer;
  SCOPED_TRACE(testing::Message() << (layer ? "layer_norm" : "rms_norm") << (c.residual ? " +residual" : "") << " x "
                                  << dtype_name(dtype_of<T>()) << " params " << dtype_name(dtype_of<P>())
                                  << " rows=" << l.rows << " cols=" << l.cols << " stride=" << l.stride
                                  << " offset=" << l.offset << " weight=" << c.weight << " bias=" << c.bias
                                  << " values=" << c.values);
  const int64_t rows = l.rows, cols = l.cols, n = rows * cols;
  const double eps = layer ? 1e-5 : 1e-6;
  std::vector<double> x = rounded<T>(make_x(rows, cols, c.values, seed));
  std::vector<double> res = rounded<T>(make_values(n, "randn", seed + 1));
  std::vector<double> s = x;
  if (c.residual)
    for (int64_t i = 0; i < n; ++i) s[i] = to_double(from_double<T>(x[i] + res[i]));
  std::vector<double> w = make_values(cols, "randn", seed + 2), b = make_values(cols, "randn", seed + 3);
  for (double& v : w) v = 1.0 + 0.5 * v;
  w = rounded<P>(w);
  b = rounded<P>(b);
  const bool use_bias = c.bias;

  std::vector<double> want(n), mean(rows), rstd(rows);
  if (layer)
    reference::layer_norm_forward(s.data(), c.weight ? w.data() : nullptr, use_bias ? b.data() : nullptr, want.data(),
                                  mean.data(), rstd.data(), rows, cols, eps);
  else
    reference::rms_norm_forward(s.data(), c.weight ? w.data() : nullptr, use_bias ? b.data() : nullptr, want.data(),
                                rstd.data(), rows, cols, eps);

  Strided<T> dx(x, l, 0.0), dres(res, l, 0.0), dy(std::vector<double>(n, kNaN), l, kNaN),
      dsum(std::vector<double>(n, kNaN), l, kNaN);
  DeviceBuffer dw(cols * sizeof(P)), dbias(cols * sizeof(P)), dmean((rows + 16) * sizeof(Acc)),
      drstd((rows + 16) * sizeof(Acc));
  upload(dw, cast_to<P>(w));
  upload(dbias, cast_to<P>(b));
  upload(dmean, std::vector<Acc>(rows + 16, Acc(kNaN)));
  upload(drstd, std::vector<Acc>(rows + 16, Acc(kNaN)));
  const DType pt = dtype_of<P>(), st = dtype_of<Acc>();
  const TensorView wv = dense_view(dw.get(), pt, {cols}), bv = dense_view(dbias.get(), pt, {cols});
  const TensorView mv = dense_view(dmean.get(), st, {rows}), rv = dense_view(drstd.get(), st, {rows});
  const NormShape shape = NormShape::of({cols});
  const TensorView* wp = c.weight ? &wv : nullptr;
  const TensorView* bp = use_bias ? &bv : nullptr;

  NormRequirements req;
  if (c.split) {
    const Status q = layer ? layer_norm_requirements(dx.view(), shape, c.residual, &req)
                           : rms_norm_requirements(dx.view(), shape, c.residual, &req);
    ASSERT_TRUE(q.is_ok()) << q.message();
    ASSERT_GT(req.workspace_bytes, 0u) << "these rows should split";
  }
  DeviceBuffer workspace(req.workspace_bytes);
  if (c.split) prepare_split_workspace(workspace.get(), req.workspace_zeroed_bytes, req.workspace_bytes);
  const Workspace ws = c.split ? Workspace{workspace.get(), req.workspace_bytes} : Workspace{};

  Status status;
  if (layer && !c.residual) status = layer_norm(dx.view(), shape, wp, bp, eps, dy.view(), &mv, &rv, ws, nullptr);
  if (layer && c.residual)
    status = add_layer_norm(dx.view(), dres.view(), shape, wp, bp, eps, dy.view(), dsum.view(), &mv, &rv, ws, nullptr);
  // rms_norm without a bias through the overloads that take none, so both stay covered.
  if (!layer && !c.residual)
    status = use_bias ? rms_norm(dx.view(), shape, wp, bp, eps, dy.view(), &rv, ws, nullptr)
                      : rms_norm(dx.view(), shape, wp, eps, dy.view(), &rv, ws, nullptr);
  if (!layer && c.residual && use_bias)
    status = add_rms_norm(dx.view(), dres.view(), shape, wp, bp, eps, dy.view(), dsum.view(), &rv, ws, nullptr);
  if (!layer && c.residual && !use_bias)
    status = add_rms_norm(dx.view(), dres.view(), shape, wp, eps, dy.view(), dsum.view(), &rv, ws, nullptr);
  ASSERT_TRUE(status.is_ok()) << status.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  if (c.split) expect_split_ran(workspace.get(), req.workspace_zeroed_bytes, req.workspace_bytes);

  const std::vector<T> y_img = dy.image(), s_img = dsum.image();
  const std::vector<Acc> got_mean = download<Acc>(dmean, rows + 16), got_rstd = download<Acc>(drstd, rows + 16);
  EXPECT_TRUE(dy.outside_untouched(y_img)) << "y was written outside its rows";
  if (c.residual) EXPECT_TRUE(dsum.outside_untouched(s_img)) << "sum was written outside its rows";
  else EXPECT_TRUE(dsum.outside_untouched(s_img)) << "sum was written without a residual";
  for (int64_t r = rows; r < rows + 16; ++r) {
    EXPECT_TRUE(std::isnan(double(got_rstd[r]))) << "rstd written past the rows";
    EXPECT_TRUE(std::isnan(double(got_mean[r]))) << "mean written past the rows";
  }
  int failures = 0;
  for (int64_t r = 0; r < rows && failures < 5; ++r) {
    // The magnitude of the terms behind y: |s| * rstd * |w| + |b| (x - mean rounds at |s|).
    double scale = 0;
    for (int64_t j = 0; j < cols; ++j)
      scale = std::max(scale, std::fabs(s[r * cols + j]) * rstd[r] * (c.weight ? std::fabs(w[j]) : 1.0) +
                                  (use_bias ? std::fabs(b[j]) : 0.0));
    // The variance of a row with a large mean is conditioned by |mean| / std: a relative
    // rounding of the mean moves it by that factor (torch's float32 Welford does the same).
    const double rstd_scale = rstd[r] * (1.0 + (layer ? std::fabs(mean[r]) * rstd[r] : 0.0));
    if (!close_enough<Acc>(got_rstd[r], rstd[r], rstd_scale)) {
      ADD_FAILURE() << "rstd of row " << r << ": got " << got_rstd[r] << ", want " << rstd[r];
      ++failures;
    }
    if (layer && !close_enough<Acc>(got_mean[r], mean[r], scale / rstd[r])) {
      ADD_FAILURE() << "mean of row " << r << ": got " << got_mean[r] << ", want " << mean[r];
      ++failures;
    }
    if (!layer && !std::isnan(double(got_mean[r]))) {
      ADD_FAILURE() << "rms_norm wrote mean";
      ++failures;
    }
    for (int64_t j = 0; j < cols && failures < 5; ++j) {
      const double got = dy.at(y_img, r, j), want_y = want[r * cols + j];
      if (!close_enough<T>(got, want_y, scale)) {
        ADD_FAILURE() << "y row " << r << " col " << j << ": got " << got << ", want " << want_y;
        ++failures;
      }
      if (c.residual && dsum.at(s_img, r, j) != s[r * cols + j]) {
        ADD_FAILURE() << "sum row " << r << " col " << j << ": got " << dsum.at(s_img, r, j) << ", want "
                      << s[r * cols + j];
        ++failures;
      }
    }
  }
}

// Backward of `kind` for T / P against the oracle, with the forward's statistics (rounded to
// the device's statistic type) fed to both. Also runs twice and demands identical bits.
// rms_bias: rms_norm's dbias is asked for (the forward had a bias); layer_norm's always is.
template <typename T, typename P>
void check_backward(Kind kind, bool with_weight, const RowLayout& l, uint32_t seed, bool rms_bias = false) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool layer = kind == Kind::kLayer;
  const bool want_dbias = layer || rms_bias;
  SCOPED_TRACE(testing::Message() << (layer ? "layer_norm" : "rms_norm") << " backward x " << dtype_name(dtype_of<T>())
                                  << " params " << dtype_name(dtype_of<P>()) << " rows=" << l.rows << " cols=" << l.cols
                                  << " stride=" << l.stride << " offset=" << l.offset << " weight=" << with_weight
                                  << " dbias=" << want_dbias);
  const int64_t rows = l.rows, cols = l.cols, n = rows * cols;
  std::vector<double> x = rounded<T>(make_x(rows, cols, "constant", seed));
  std::vector<double> dy = rounded<T>(make_values(n, "randn", seed + 1));
  std::vector<double> w = make_values(cols, "randn", seed + 2);
  for (double& v : w) v = 1.0 + 0.5 * v;
  w = rounded<P>(w);
  const double* wp_host = with_weight ? w.data() : nullptr;
  std::vector<double> y(n), mean(rows), rstd(rows);
  if (layer) reference::layer_norm_forward(x.data(), wp_host, nullptr, y.data(), mean.data(), rstd.data(), rows, cols, 1e-5);
  else reference::rms_norm_forward(x.data(), wp_host, y.data(), rstd.data(), rows, cols, 1e-5);
  for (int64_t r = 0; r < rows; ++r) {
    mean[r] = static_cast<Acc>(mean[r]);
    rstd[r] = static_cast<Acc>(rstd[r]);
  }
  std::vector<double> want_dx(n), want_dw(cols), want_db(cols);
  if (layer)
    reference::layer_norm_backward(x.data(), dy.data(), mean.data(), rstd.data(), wp_host, want_dx.data(),
                                   want_dw.data(), want_db.data(), rows, cols);
  else
    reference::rms_norm_backward(x.data(), dy.data(), rstd.data(), wp_host, want_dx.data(), want_dw.data(),
                                 rms_bias ? want_db.data() : nullptr, rows, cols);

  Strided<T> dxs(x, l, 0.0), dys(dy, l, 0.0), dout(std::vector<double>(n, kNaN), l, kNaN);
  DeviceBuffer dw_in(cols * sizeof(P)), dmean(rows * sizeof(Acc)), drstd(rows * sizeof(Acc)),
      dgw((cols + 16) * sizeof(P)), dgb((cols + 16) * sizeof(P));
  upload(dw_in, cast_to<P>(w));
  upload(dmean, cast_to<Acc>(mean));
  upload(drstd, cast_to<Acc>(rstd));
  const DType pt = dtype_of<P>(), st = dtype_of<Acc>();
  const TensorView wv = dense_view(dw_in.get(), pt, {cols}), mv = dense_view(dmean.get(), st, {rows}),
                   rv = dense_view(drstd.get(), st, {rows}), gwv = dense_view(dgw.get(), pt, {cols}),
                   gbv = dense_view(dgb.get(), pt, {cols});
  const NormShape shape = NormShape::of({cols});
  NormRequirements ws_req;
  ASSERT_TRUE(norm_backward_requirements(dxs.view(), shape, &ws_req).is_ok());
  const std::size_t ws_bytes = ws_req.workspace_bytes;
  DeviceBuffer ws(ws_bytes);
  const TensorView dx_view = dout.view();

  auto run_once = [&]() {
    upload(dgw, std::vector<P>(cols + 16, from_double<P>(kNaN)));
    upload(dgb, std::vector<P>(cols + 16, from_double<P>(kNaN)));
    const Status s = layer ? layer_norm_backward(dys.view(), dxs.view(), shape, mv, rv, with_weight ? &wv : nullptr,
                                                 &dx_view, &gwv, &gbv, {ws.get(), ws_bytes}, nullptr)
                 : rms_bias ? rms_norm_backward(dys.view(), dxs.view(), shape, rv, with_weight ? &wv : nullptr,
                                                &dx_view, &gwv, &gbv, {ws.get(), ws_bytes}, nullptr)
                            : rms_norm_backward(dys.view(), dxs.view(), shape, rv, with_weight ? &wv : nullptr,
                                                &dx_view, &gwv, {ws.get(), ws_bytes}, nullptr);
    EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  run_once();
  const std::vector<T> dx_img = dout.image();
  const std::vector<P> gw = download<P>(dgw, cols + 16), gb = download<P>(dgb, cols + 16);
  EXPECT_TRUE(dout.outside_untouched(dx_img)) << "dx was written outside its rows";
  for (int64_t j = cols; j < cols + 16; ++j) {
    EXPECT_TRUE(std::isnan(to_double(gw[j]))) << "dweight written past cols";
    EXPECT_TRUE(std::isnan(to_double(gb[j]))) << "dbias written past cols";
  }

  int failures = 0;
  for (int64_t r = 0; r < rows && failures < 5; ++r) {
    // dx = rstd (g - mean g - xhat mean(g xhat)): the scale of those terms.
    double g_max = 0, g_abs = 0, gx_abs = 0, xhat_max = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double g = dy[r * cols + j] * (with_weight ? w[j] : 1.0);
      const double xhat = (x[r * cols + j] - (layer ? mean[r] : 0.0)) * rstd[r];
      g_max = std::max(g_max, std::fabs(g));
      g_abs += std::fabs(g);
      gx_abs += std::fabs(g * xhat);
      xhat_max = std::max(xhat_max, std::fabs(x[r * cols + j]) * rstd[r]);
    }
    const double scale = rstd[r] * (g_max + g_abs / cols + xhat_max * (1.0 + gx_abs / cols));
    for (int64_t j = 0; j < cols && failures < 5; ++j) {
      const double got = dout.at(dx_img, r, j), want = want_dx[r * cols + j];
      if (!close_enough<T>(got, want, scale)) {
        ADD_FAILURE() << "dx row " << r << " col " << j << ": got " << got << ", want " << want;
        ++failures;
      }
    }
  }
  for (int64_t j = 0; j < cols && failures < 5; ++j) {
    double w_scale = 0, b_scale = 0;
    for (int64_t r = 0; r < rows; ++r) {
      w_scale += std::fabs(dy[r * cols + j] * std::fabs(x[r * cols + j]) * rstd[r]);
      b_scale += std::fabs(dy[r * cols + j]);
    }
    if (!close_enough<P>(to_double(gw[j]), want_dw[j], w_scale)) {
      ADD_FAILURE() << "dweight col " << j << ": got " << to_double(gw[j]) << ", want " << want_dw[j];
      ++failures;
    }
    if (want_dbias && !close_enough<P>(to_double(gb[j]), want_db[j], b_scale)) {
      ADD_FAILURE() << "dbias col " << j << ": got " << to_double(gb[j]) << ", want " << want_db[j];
      ++failures;
    }
    if (!want_dbias && !std::isnan(to_double(gb[j]))) {
      ADD_FAILURE() << "rms_norm wrote dbias it was not given";
      ++failures;
    }
  }
  // Bitwise determinism of all outputs.
  run_once();
  const std::vector<T> dx_again = dout.image();
  const std::vector<P> gw_again = download<P>(dgw, cols + 16), gb_again = download<P>(dgb, cols + 16);
  EXPECT_EQ(0, std::memcmp(dx_again.data(), dx_img.data(), dx_img.size() * sizeof(T))) << "dx differs between runs";
  EXPECT_EQ(0, std::memcmp(gw_again.data(), gw.data(), gw.size() * sizeof(P))) << "dweight differs between runs";
  EXPECT_EQ(0, std::memcmp(gb_again.data(), gb.data(), gb.size() * sizeof(P))) << "dbias differs between runs";
}

// Row lengths: tiny, odd, primes, powers of two, and the long rows of the benchmark grid (24577
// and 32768: the wide rows, row_kernel_plan.hpp).
const std::vector<int64_t> kRowLengths = {1,     2,     3,     31,    33,    127,   781,   1000,
                                          2045,  4096,  4099,  12800, 24577, 32768, 40009, 65537, 262144};

int64_t rows_for(int64_t cols) { return std::clamp<int64_t>((1 << 20) / cols, 5, 67); }

template <typename T, typename P> void forward_sweep(Kind kind, bool residual) {
  uint32_t seed = 1;
  for (int64_t cols : kRowLengths) {
    const int64_t rows = rows_for(cols);
    const int64_t wide = (cols + 63) / 64 * 64 + 64;
    check_forward<T, P>({kind, residual, true, true, "randn"}, {rows, cols, cols, 0}, seed++);
    check_forward<T, P>({kind, residual, true, false, "constant"}, {rows, cols, wide, 0}, seed++);
    check_forward<T, P>({kind, residual, false, false, "large_mean"}, {rows, cols, cols + 1, 1}, seed++);
    // rms_norm's bias without a weight on unaligned rows (its staged rows then meet the
    // parameters off their vectors).
    if (kind == Kind::kRms)
      check_forward<T, P>({kind, residual, false, true, "randn"}, {rows, cols, cols + 1, 1}, seed++);
    if (::testing::Test::HasFailure()) return;  // one bad length is enough
  }
}

template <typename T, typename P> void backward_sweep(Kind kind) {
  uint32_t seed = 100;
  for (int64_t cols : kRowLengths) {
    const int64_t rows = cols >= 65536 ? 9 : std::clamp<int64_t>((1 << 19) / cols, 5, 600);
    check_backward<T, P>(kind, true, {rows, cols, cols, 0}, seed++);
    check_backward<T, P>(kind, false, {rows, cols, cols + 3, 1}, seed++);
    if (kind == Kind::kRms) check_backward<T, P>(kind, true, {rows, cols, cols + 3, 1}, seed++, true);
    if (::testing::Test::HasFailure()) return;
  }
}

class NormGpu : public ::testing::Test {
 protected:
  void SetUp() override { REDUCEKIT_REQUIRE_GPU(); }
};

#define REDUCEKIT_NORM_TESTS(NAME, T, P)                                                            \
  TEST_F(NormGpu, LayerNorm##NAME) { forward_sweep<T, P>(Kind::kLayer, false); }                    \
  TEST_F(NormGpu, RmsNorm##NAME) { forward_sweep<T, P>(Kind::kRms, false); }                        \
  TEST_F(NormGpu, AddLayerNorm##NAME) { forward_sweep<T, P>(Kind::kLayer, true); }                  \
  TEST_F(NormGpu, AddRmsNorm##NAME) { forward_sweep<T, P>(Kind::kRms, true); }                      \
  TEST_F(NormGpu, LayerNormBackward##NAME) { backward_sweep<T, P>(Kind::kLayer); }                  \
  TEST_F(NormGpu, RmsNormBackward##NAME) { backward_sweep<T, P>(Kind::kRms); }

REDUCEKIT_NORM_TESTS(Float32, float, float)
REDUCEKIT_NORM_TESTS(Float64, double, double)
REDUCEKIT_NORM_TESTS(Float16, __half, __half)
REDUCEKIT_NORM_TESTS(BFloat16, __nv_bfloat16, __nv_bfloat16)
REDUCEKIT_NORM_TESTS(Float16ParamsFloat32, __half, float)
REDUCEKIT_NORM_TESTS(BFloat16ParamsFloat32, __nv_bfloat16, float)

// Re-read rows (RowKernelLimits::reread_above_words), forced by the knob for every family and
// dtype (by default only some re-read): the forwards and backwards of rows past one CTA's tile on
// small tiles, read twice.
TEST_F(NormGpu, RereadRows) {
  const ScopedTuning reread("reread_above_words", 16);
  for (const int64_t small : {int64_t(1) << 30, int64_t(0)}) {  // tiles of 16 words, then of one vector
    SCOPED_TRACE(testing::Message() << "small tiles " << small);
    const ScopedTuning small_tiles("reread_small_tiles_from_bytes", small);
    check_forward<float, float>({Kind::kLayer, false, true, true, "large_mean"}, {3, 40009, 40009, 0}, 71);
    check_forward<__nv_bfloat16, float>({Kind::kRms, true, true, false, "constant"}, {4, 65536, 65600, 0}, 72);
    check_forward<__half, __half>({Kind::kLayer, true, true, true, "randn"}, {2, 100003, 100004, 1}, 73);
    check_forward<double, double>({Kind::kRms, false, true, false, "randn"}, {2, 32769, 32769, 0}, 74);
    check_backward<float, float>(Kind::kLayer, true, {3, 65536, 65536, 0}, 75);
    check_backward<__nv_bfloat16, float>(Kind::kRms, true, {3, 40009, 40012, 1}, 76);
    check_forward<float, float>({Kind::kLayer, true, true, true, "randn"}, {5, 8193, 8196, 0}, 77);
    check_forward<float, float>({Kind::kLayer, false, true, true, "step"}, {3, 131072, 131072, 0}, 78);
    check_forward<__nv_bfloat16, float>({Kind::kLayer, true, true, false, "step"}, {2, 65536, 65544, 1}, 79);
  }
}

// Wide rows (one CTA of up to 1024 threads a row: rms_norm with and without bias, 16-bit
// layer_norm of 7K-16K values, row_kernel_plan.hpp; 16-bit aligned whole-vector rows packed) and,
// with the knob off, the plans they replace (re-read rows, clusters, staged rows): aligned and
// shifted rows, ragged lengths, with and without parameters.
TEST_F(NormGpu, WideRowsAndThePlansTheyReplace) {
  for (const bool shipped : {true, false}) {  // 1 would force wide rows where no kernel is built
    SCOPED_TRACE(shipped ? "the shipped plans" : "wide_rows 0");
    std::optional<ScopedTuning> knob;
    if (!shipped) knob.emplace("wide_rows", 0);
    check_forward<float, float>({Kind::kLayer, false, true, true, "large_mean"}, {3, 32768, 32768, 0}, 91);
    check_forward<float, float>({Kind::kRms, false, true, false, "randn"}, {4, 20001, 20003, 1}, 92);
    check_forward<float, float>({Kind::kRms, false, true, true, "large_mean"}, {3, 32768, 32768, 0}, 90);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, false, true, false, "randn"}, {4, 20000, 20000, 0}, 89);
    check_forward<__half, __half>({Kind::kRms, false, false, false, "large_mean"}, {3, 24577, 24580, 1}, 88);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, false, false, false, "randn"}, {5, 16392, 16392, 0}, 93);
    check_forward<__nv_bfloat16, float>({Kind::kRms, false, true, true, "constant"}, {3, 32768, 32776, 0}, 94);
    check_forward<__half, __half>({Kind::kLayer, false, true, true, "randn"}, {2, 32767, 32768, 1}, 95);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, false, true, true, "large_mean"}, {4, 10240, 10240, 0}, 96);
    check_forward<__half, __half>({Kind::kLayer, false, true, true, "randn"}, {3, 12800, 12808, 1}, 97);
    check_forward<__nv_bfloat16, float>({Kind::kLayer, false, true, false, "randn"}, {3, 8200, 8200, 0}, 98);
    check_forward<__half, __half>({Kind::kLayer, false, true, true, "large_mean"}, {4, 8192, 8192, 0}, 141);
    check_forward<__half, __half>({Kind::kRms, false, true, false, "randn"}, {3, 12800, 12808, 1}, 142);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, false, true, true, "randn"}, {3, 14336, 14336, 0}, 143);
    // float32 layer_norm: whole rows of 768 threads, partial ones of 512, shifted ones (the
    // unpacked kernel), and 20000, a partial row past 512 threads (re-read).
    check_forward<float, float>({Kind::kLayer, false, true, true, "randn"}, {4, 24576, 24576, 0}, 144);
    check_forward<float, float>({Kind::kLayer, false, true, false, "large_mean"}, {3, 16000, 16000, 0}, 145);
    check_forward<float, float>({Kind::kLayer, false, true, true, "randn"}, {3, 12800, 12808, 1}, 146);
    check_forward<float, float>({Kind::kLayer, false, false, false, "randn"}, {2, 20000, 20000, 0}, 147);
    // The fused residual forms hold s (HoldsInputSum): packed aligned rows, shifted ones (the
    // unpacked sum body), whole and partial, 16-bit and float32, both norms.
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, true, true, true, "randn"}, {4, 4096, 4096, 0}, 148);
    check_forward<__half, float>({Kind::kLayer, true, true, false, "large_mean"}, {3, 8200, 8208, 1}, 149);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, true, true, false, "randn"}, {4, 10240, 10240, 0}, 150);
    check_forward<__nv_bfloat16, float>({Kind::kRms, true, true, true, "randn"}, {3, 12800, 12808, 1}, 151);
    check_forward<float, float>({Kind::kLayer, true, true, true, "large_mean"}, {3, 32768, 32768, 0}, 152);
    check_forward<float, float>({Kind::kLayer, true, false, true, "randn"}, {3, 12800, 12804, 1}, 153);
    check_forward<float, float>({Kind::kRms, true, true, false, "randn"}, {3, 24576, 24576, 0}, 154);
    check_forward<float, float>({Kind::kRms, true, true, true, "randn"}, {2, 16000, 16003, 2}, 155);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, true, true, true, "large_mean"}, {3, 32768, 32768, 0}, 190);
    check_forward<__half, float>({Kind::kRms, true, true, true, "randn"}, {3, 24576, 24584, 1}, 191);
  }
}

// 16-bit wide rows (rms_norm with and without a bias at 24576, layer_norm at 10240 on the lean
// kernel and 14336 on the full one, as its whole rows of 1024 and 4096 values): aligned rows of
// whole vectors cross the reduction as packs
// (row_wide_packed_kernel_ext and its two-phase form), shifted rows take the unpacked wide
// kernel; both give the same bits, row by row (batch invariance across layouts). The other plans
// of those lengths (layer_norm's re-read rows at 24576, rms_norm's at 10240), likewise. rms_norm's
// packed rows of up to 512 threads run the 64-register kernel: 12800 (416 threads), 14336 (448,
// a whole row).
// float32 layer_norm's packed wide rows likewise: whole 32768 and 12288, partial 12800 and 16000;
// and the fused residual forms (`residual`: y and s), whose wide rows hold s. Shifted x rows with
// y on its granules (the packed kernels' shifted loads) too.
template <typename T>
void packed_wide_rows_match_shifted_ones(const std::vector<int64_t>& lengths, bool layer_norm_only,
                                         bool residual = false) {
  const DType dt = dtype_of<T>();
  for (const int64_t cols : lengths) {
    SCOPED_TRACE(testing::Message() << dtype_name(dt) << " cols=" << cols);
    const int64_t rows = 6;
    const std::vector<double> values = make_values(rows * cols, "randn", 301);
    const std::vector<double> residuals = make_values(rows * cols, "randn", 304);
    std::vector<double> w = make_values(cols, "randn", 302);
    for (double& v : w) v = 1.0 + 0.5 * v;
    DeviceBuffer dw(cols * sizeof(T)), db(cols * sizeof(T));
    upload(dw, cast_to<T>(w));
    upload(db, cast_to<T>(make_values(cols, "randn", 303)));
    const TensorView wv = dense_view(dw.get(), dt, {cols}), bv = dense_view(db.get(), dt, {cols});
    const RowLayout aligned{rows, cols, cols, 0}, shifted{rows, cols, cols + 3, 1};
    const std::vector<double> poison(rows * cols, kNaN);
    enum Form { kRms, kRmsBias, kLayer };
    for (const Form form : {kRms, kRmsBias, kLayer}) {
      if (layer_norm_only && form != kLayer) continue;
      SCOPED_TRACE(form == kRms ? "rms_norm" : form == kRmsBias ? "rms_norm with a bias" : "layer_norm");
      Strided<T> xa(values, aligned, 0.0), xs(values, shifted, 0.0), ya(poison, aligned, kNaN), ys(poison, shifted, kNaN);
      Strided<T> ra(residuals, aligned, 0.0), rs(residuals, shifted, 0.0), sa(poison, aligned, kNaN), ss(poison, shifted, kNaN);
      // x shifted, y on its granules: the packed kernels' shifted loads (one input)
      Strided<T> yx(poison, aligned, kNaN), sx(poison, aligned, kNaN);
      for (const auto& [x, r, y, sum] :
           {std::tuple{&xa, &ra, &ya, &sa}, std::tuple{&xs, &rs, &ys, &ss}, std::tuple{&xs, &rs, &yx, &sx}}) {
        const NormShape shape = NormShape::of({cols});
        Status status;
        if (residual)
          status = form == kRms       ? add_rms_norm(x->view(), r->view(), shape, &wv, 1e-6, y->view(), sum->view(), nullptr, nullptr)
                   : form == kRmsBias ? add_rms_norm(x->view(), r->view(), shape, &wv, &bv, 1e-6, y->view(), sum->view(), nullptr, nullptr)
                                      : add_layer_norm(x->view(), r->view(), shape, &wv, &bv, 1e-5, y->view(), sum->view(),
                                                       nullptr, nullptr, nullptr);
        else
          status = form == kRms       ? rms_norm(x->view(), shape, &wv, 1e-6, y->view(), nullptr, Workspace{}, nullptr)
                   : form == kRmsBias ? rms_norm(x->view(), shape, &wv, &bv, 1e-6, y->view(), nullptr, Workspace{}, nullptr)
                                      : layer_norm(x->view(), shape, &wv, &bv, 1e-5, y->view(), nullptr, nullptr, Workspace{}, nullptr);
        ASSERT_TRUE(status.is_ok()) << status.message();
      }
      for (const auto& [a_out, b_out, name] : {std::tuple{&ya, &ys, "y"}, std::tuple{&sa, &ss, "s"}}) {
        if (!residual && a_out == &sa) continue;
        const std::vector<T> a = a_out->image(), b = b_out->image();
        for (int64_t r = 0; r < rows; ++r)
          EXPECT_EQ(0, std::memcmp(&a[aligned.offset + r * aligned.stride], &b[shifted.offset + r * shifted.stride],
                                   cols * sizeof(T)))
              << name << " row " << r;
      }
      // Bit for bit, the NaN poison past the rows included.
      EXPECT_TRUE(same_bits(ya.image(), yx.image())) << "y from shifted x rows";
      if (residual) EXPECT_TRUE(same_bits(sa.image(), sx.image())) << "s from shifted x rows";
    }
  }
}

TEST_F(NormGpu, PackedWideRowsMatchShiftedOnes) {
  packed_wide_rows_match_shifted_ones<__nv_bfloat16>({24576, 10240, 12800, 14336, 1024, 4096}, false);
  packed_wide_rows_match_shifted_ones<float>({32768, 12288, 12800, 16000}, true);
  // The fused residual forms, add_layer_norm and add_rms_norm (with and without a bias).
  packed_wide_rows_match_shifted_ones<__nv_bfloat16>({4096, 8200, 16384, 24576}, false, true);
  packed_wide_rows_match_shifted_ones<float>({32768, 12800}, false, true);
}

// Filled wide rows (wide_fill_above_threads, 512 in the policy): float32 rows past 512 threads
// on 1024-thread CTAs at 5-7 vectors a thread (layer_norm, rms_norm with a bias or not, add_layer_norm,
// add_rms_norm; the residual forms' rows that are not whole too), against the oracle, and the
// residual forms' aligned and shifted rows with the same bits, row by row.
TEST_F(NormGpu, FilledWideRows) {
  check_forward<float, float>({Kind::kRms, false, true, false, "randn"}, {3, 20483, 20483, 0}, 325);
  check_forward<float, float>({Kind::kRms, false, true, false, "large_mean"}, {2, 24576, 24579, 1}, 326);
  check_forward<float, float>({Kind::kRms, false, true, true, "randn"}, {3, 20483, 20483, 0}, 329);
  check_forward<float, float>({Kind::kRms, false, true, true, "large_mean"}, {2, 28672, 28675, 1}, 330);
  check_forward<float, float>({Kind::kLayer, true, true, true, "randn"}, {3, 20000, 20000, 0}, 327);
  check_forward<float, float>({Kind::kRms, true, true, false, "large_mean"}, {2, 18000, 18003, 1}, 328);
  check_forward<float, float>({Kind::kLayer, false, true, true, "randn"}, {3, 20480, 20480, 0}, 320);
  check_forward<float, float>({Kind::kLayer, false, true, false, "large_mean"}, {2, 28672, 28675, 1}, 321);
  check_forward<float, float>({Kind::kLayer, true, true, true, "large_mean"}, {3, 24576, 24579, 1}, 322);
  check_forward<float, float>({Kind::kRms, true, true, false, "randn"}, {3, 28672, 28672, 0}, 323);
  check_forward<float, float>({Kind::kRms, true, true, true, "randn"}, {2, 20480, 20483, 2}, 324);
  packed_wide_rows_match_shifted_ones<float>({20480, 24576, 28672}, true);
  packed_wide_rows_match_shifted_ones<float>({18000, 20480, 24576, 28672}, false, true);
}

// float32 rows off their granules at 32 values a thread (rms_norm's one-CTA rows): the block
// kernel held to 72 registers where it keeps more CTAs resident than the free one (448 threads
// at 14336; with a bias, 352 at 11008 too), else the free one; against the oracle (shifted, odd)
// and with the aligned rows' bits, x alone shifted included.
TEST_F(NormGpu, ShiftedFloatBlockRows) {
  check_forward<float, float>({Kind::kRms, false, true, false, "randn"}, {3, 14336, 14339, 1}, 341);
  check_forward<float, float>({Kind::kRms, false, true, true, "large_mean"}, {3, 11008, 11011, 2}, 342);
  check_forward<float, float>({Kind::kRms, false, true, true, "randn"}, {2, 14335, 14335, 0}, 343);
  check_forward<float, float>({Kind::kRms, false, true, false, "randn"}, {3, 11008, 11009, 3}, 344);
  packed_wide_rows_match_shifted_ones<float>({11008, 14336}, false);
}

// The fused residual forms' streamed rows write s = x + residual in their first pass and read it
// back in the second (RowKernelLimits::read_back_second); off, they read x and residual again.
// Both against the oracle: aligned and shifted rows, ragged lengths, s in place of the residual.
TEST_F(NormGpu, ResidualRowsReadTheirSumBack) {
  for (const int read_back : {1, 0}) {
    SCOPED_TRACE(testing::Message() << "read_back_second " << read_back);
    const ScopedTuning knob("read_back_second", read_back);
    check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, true, true, true, "large_mean"}, {3, 32768, 32768, 0}, 96);
    check_forward<__nv_bfloat16, float>({Kind::kRms, true, true, false, "randn"}, {4, 40009, 40012, 1}, 97);
    check_forward<__half, __half>({Kind::kLayer, true, false, false, "randn"}, {2, 100003, 100003, 0}, 98);
    check_forward<__half, float>({Kind::kRms, true, true, true, "constant"}, {3, 65536, 65544, 0}, 99);
    const ScopedTuning reread("reread_above_words", 16);  // float32 rows streamed as well
    check_forward<float, float>({Kind::kLayer, true, true, true, "randn"}, {3, 20001, 20003, 1}, 100);
  }
}

// layer_norm's y, mean and rstd bits under each of a tuning knob's values, the first the reference.
template <typename T>
void layer_norm_bits_alike(const char* knob_name, std::vector<int> values, int64_t cols, uint32_t seed, int64_t rows = 3) {
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " cols " << cols << " " << knob_name);
  const int64_t n = rows * cols;
  DeviceBuffer x(cast_to<T>(make_x(rows, cols, "step", seed)));
  DeviceBuffer w(cast_to<T>(make_values(cols, "randn", seed + 2))), b(cast_to<T>(make_values(cols, "randn", seed + 3)));
  DeviceBuffer y(n * sizeof(T)), mean(rows * 4), rstd(rows * 4);
  const DType dt = dtype_of<T>();
  const TensorView xv = dense_view(x.get(), dt, {rows, cols}), yv = dense_view(y.get(), dt, {rows, cols});
  const TensorView wv = dense_view(w.get(), dt, {cols}), bv = dense_view(b.get(), dt, {cols});
  const TensorView mv = dense_view(mean.get(), DType::kFloat32, {rows}), qv = dense_view(rstd.get(), DType::kFloat32, {rows});
  std::vector<std::vector<std::vector<unsigned char>>> images;
  for (const int value : values) {
    const ScopedTuning knob(knob_name, value);
    const Status status = layer_norm(xv, NormShape::of({cols}), &wv, &bv, 1e-5, yv, &mv, &qv, Workspace{}, nullptr);
    ASSERT_TRUE(status.is_ok()) << status.message();
    images.push_back({download<unsigned char>(y, n * sizeof(T)), download<unsigned char>(mean, rows * 4),
                      download<unsigned char>(rstd, rows * 4)});
  }
  const char* names[] = {"y", "mean", "rstd"};
  for (std::size_t v = 1; v < values.size(); ++v)
    for (std::size_t k = 0; k < images[0].size(); ++k)
      EXPECT_EQ(images[0][k], images[v][k]) << names[k] << " at " << values[v];
}

// Loads ahead (RowKernelLimits::loads_ahead: level 1 in the first pass, 16-bit layer_norm's
// default; 2, float32's, in the output pass too) change when a re-read row's loads are issued,
// never the arithmetic: the same bits at every level, on one-vector tiles in groups of whole
// tiles (four float32, two 16-bit), then the rest one at a time: float32 10240, one group and
// the last tile; 16384, two groups ending the row; 40008, the last group would leave the row;
// 16-bit 24576, three groups ending the row; 12800 and 14336, one group, then two tiles. Right
// against the oracle.
TEST_F(NormGpu, LoadsAheadChangeNoBits) {
  layer_norm_bits_alike<float>("loads_ahead", {0, 1, 2}, 10240, 111);
  layer_norm_bits_alike<float>("loads_ahead", {0, 1, 2}, 16384, 118);
  layer_norm_bits_alike<__nv_bfloat16>("loads_ahead", {0, 1, 2}, 24576, 119);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, false, true, true, "step"}, {3, 24576, 24576, 0}, 120);
  check_forward<float, float>({Kind::kLayer, false, true, true, "step"}, {3, 16384, 16384, 0}, 126);
  layer_norm_bits_alike<float>("loads_ahead", {0, 1, 2}, 40008, 112);
  layer_norm_bits_alike<__nv_bfloat16>("loads_ahead", {0, 1, 2}, 12800, 113);
  layer_norm_bits_alike<__half>("loads_ahead", {0, 1, 2}, 14336, 114);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, false, true, true, "step"}, {3, 12800, 12800, 0}, 115);
  const ScopedTuning knob("loads_ahead", 2);
  check_forward<float, float>({Kind::kLayer, false, true, true, "step"}, {3, 10240, 10240, 0}, 116);
  check_forward<float, float>({Kind::kLayer, false, false, true, "large_mean"}, {3, 40008, 40008, 0}, 117);
}

// 16-bit layer_norm's packed wide rows of up to 416 threads run the lean kernel (fewer registers,
// RowKernelLimits::wide_lean_max_threads) but whole rows of up to 384 threads the full one
// (wide_whole_roomy_max_threads): the same arithmetic, the same bits as the other kernel (knob 0),
// at 8200 (288 threads), 10240 and 12288 (320 and 384, whole rows: the full kernel's whole-row
// body against the lean kernel) and 12800 (416); right against the oracle.
TEST_F(NormGpu, LeanWideRowsChangeNoBits) {
  layer_norm_bits_alike<__nv_bfloat16>("wide_lean_max_threads", {416, 0}, 8200, 121);
  layer_norm_bits_alike<__half>("wide_whole_roomy_max_threads", {384, 0}, 10240, 122);
  layer_norm_bits_alike<__nv_bfloat16>("wide_whole_roomy_max_threads", {384, 0}, 12288, 144);
  layer_norm_bits_alike<__nv_bfloat16>("wide_lean_max_threads", {416, 0}, 12800, 123);
  check_forward<__half, __half>({Kind::kLayer, false, true, true, "large_mean"}, {5, 12800, 12800, 0}, 124);
  check_forward<__nv_bfloat16, float>({Kind::kLayer, false, false, true, "randn"}, {4, 8200, 8200, 0}, 125);
}

// rms_norm of three 16-bit rows of `cols` (T: __half or __nv_bfloat16), with or without a bias,
// under the plan the tuning in force gives: y's bytes, to compare kernel forms bit for bit.
template <typename T> class RmsRowBits {
 public:
  RmsRowBits(int64_t cols, uint32_t seed)
      : cols_(cols), x_(cast_to<T>(make_x(kRows, cols, "randn", seed))), y_(kRows * cols * 2),
        w_(cast_to<T>(make_values(cols, "randn", seed + 1))), b_(cast_to<T>(make_values(cols, "randn", seed + 2))) {}
  std::vector<unsigned char> run(bool bias) const {
    const DType dt = dtype_of<T>();
    const TensorView xv = dense_view(x_.get(), dt, {kRows, cols_}), yv = dense_view(y_.get(), dt, {kRows, cols_});
    const TensorView wv = dense_view(w_.get(), dt, {cols_}), bv = dense_view(b_.get(), dt, {cols_});
    const Status status = bias ? rms_norm(xv, NormShape::of({cols_}), &wv, &bv, 1e-6, yv, nullptr, Workspace{}, nullptr)
                               : rms_norm(xv, NormShape::of({cols_}), &wv, 1e-6, yv, nullptr, Workspace{}, nullptr);
    EXPECT_TRUE(status.is_ok()) << status.message();
    return download<unsigned char>(y_, kRows * cols_ * 2);
  }

 private:
  static constexpr int64_t kRows = 3;
  int64_t cols_;
  DeviceBuffer x_, y_, w_, b_;
};

// rms_norm's packed wide rows of 513-1024 threads on the roomy kernel (one CTA an SM at 64
// registers; shipped for whole rows with a bias, by knobs for the rest), with and without a
// bias, whole (32768) and not (20000): right against the oracle, and the same bits as the
// 32-register kernel and as the shipped plan.
TEST_F(NormGpu, RoomyWideRowsPastHalfACta) {
  for (const int64_t cols : {int64_t(32768), int64_t(20000)}) {
    SCOPED_TRACE(testing::Message() << "cols " << cols);
    const RmsRowBits<__nv_bfloat16> rows(cols, 151);
    for (const bool bias : {false, true}) {
      const std::vector<unsigned char> shipped = rows.run(bias);
      for (const int most : {512, 1024}) {
        const ScopedTuning knob("wide_roomy_max_threads", most), whole("wide_whole_roomy_max_threads", 0);
        EXPECT_EQ(rows.run(bias), shipped) << (bias ? "with a bias" : "without") << ", roomy up to " << most << " threads";
      }
    }
  }
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, false, true, true, "randn"}, {3, 32768, 32768, 0}, 154);
  check_forward<__half, float>({Kind::kRms, false, true, true, "randn"}, {3, 24576, 24576, 0}, 156);
  const ScopedTuning knob("wide_roomy_max_threads", 1024);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, false, true, false, "randn"}, {3, 32768, 32768, 0}, 157);
  check_forward<__half, __half>({Kind::kRms, false, true, false, "large_mean"}, {3, 20000, 20000, 0}, 155);
  check_forward<__half, float>({Kind::kRms, false, true, true, "randn"}, {3, 20000, 20000, 0}, 158);
}

// rms_norm's 16-bit packed wide rows of 513-768 threads run the middle form (two CTAs an SM at
// 40 registers), with and without a bias, ragged (20000) and whole (24576), and with a bias
// ragged ones from 385 threads (12800): the same bits as the 32-register form (middle form off)
// and the roomy one (roomy band to 1024 threads), and right against the oracle.
TEST_F(NormGpu, MidWideRowsChangeNoBits) {
  for (const int64_t cols : {int64_t(12800), int64_t(20000), int64_t(24576)}) {
    SCOPED_TRACE(testing::Message() << "cols " << cols);
    const RmsRowBits<__half> rows(cols, 161);
    for (const bool bias : {false, true}) {
      const std::vector<unsigned char> shipped = rows.run(bias);
      {
        const ScopedTuning off("wide_mid_max_threads", 0), whole("wide_whole_roomy_max_threads", 0);
        EXPECT_EQ(rows.run(bias), shipped) << (bias ? "with a bias" : "without") << ", the 32-register form";
      }
      const ScopedTuning roomy("wide_roomy_max_threads", 1024);
      EXPECT_EQ(rows.run(bias), shipped) << (bias ? "with a bias" : "without") << ", the roomy form";
    }
  }
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, false, true, true, "randn"}, {3, 20000, 20000, 0}, 164);
  check_forward<__half, float>({Kind::kRms, false, true, false, "large_mean"}, {3, 24576, 24576, 0}, 165);
  check_forward<__nv_bfloat16, float>({Kind::kRms, false, true, true, "randn"}, {3, 24576, 24576, 0}, 166);
  check_forward<__half, __half>({Kind::kRms, false, true, false, "randn"}, {5, 16416, 16416, 0}, 167);
  check_forward<__nv_bfloat16, float>({Kind::kRms, false, true, true, "large_mean"}, {5, 12800, 12800, 0}, 168);
}

// 16-bit rows of two inputs (5633-6144 values: the residual norms, the norm backward) whose
// two-row ring fills 48 KiB of dynamic shared memory (the plans' smem_bytes) beside the kernels'
// static reduction slots: past 48 KiB in all, they launch only with the shared-memory opt-in.
TEST_F(NormGpu, RingRowsOf48KiBLaunch) {
  const ScopedTuning not_wide("wide_rows", 0);  // the residual rows' default plan is wide
  check_forward<__nv_bfloat16, float>({Kind::kRms, true, true, false, "randn"}, {5, 6144, 6144, 0}, 173);
  check_forward<__half, __half>({Kind::kLayer, true, true, true, "randn"}, {5, 5700, 5700, 0}, 174);
  check_backward<__nv_bfloat16, float>(Kind::kLayer, true, {600, 6144, 6144, 0}, 175);
  check_backward<__half, __half>(Kind::kRms, true, {600, 6000, 6000, 0}, 176, true);
}

// The fused residual forms in place (s into the residual's own tensor, y into x's, as a pre-norm
// block calls them), with the sum read back and without: bitwise the out-of-place results, on
// streamed rows whose first pass overwrites the residual it reads; an aligned batch (40008
// columns) and shifted rows (40009: s written whole in the first pass); wide rows holding s
// (8192, 24576), whose shifted body (every tensor one element off 16 bytes) loads vectors that
// straddle their neighbours' s.
TEST_F(NormGpu, ResidualInPlaceMatchesOutOfPlace) {
  for (const int64_t cols : {40008, 40009, 8192, 8200, 24576}) {
    for (const int64_t offset : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "cols " << cols << " offset " << offset);
      const int64_t rows = 4, n = rows * cols;
      std::vector<__nv_bfloat16> xs = cast_to<__nv_bfloat16>(make_values(n, "randn", 201));
      std::vector<__nv_bfloat16> rs = cast_to<__nv_bfloat16>(make_values(n, "randn", 202));
      xs.insert(xs.begin(), offset, from_double<__nv_bfloat16>(0.0));
      rs.insert(rs.begin(), offset, from_double<__nv_bfloat16>(0.0));
      DeviceBuffer x(xs), r(rs), w(cast_to<__nv_bfloat16>(make_values(cols, "randn", 203))), y((n + offset) * 2),
          s((n + offset) * 2);
      const auto at = [&](const DeviceBuffer& b) { return static_cast<__nv_bfloat16*>(b.get()) + offset; };
      const TensorView xv = dense_view(at(x), DType::kBFloat16, {rows, cols});
      const TensorView rv = dense_view(at(r), DType::kBFloat16, {rows, cols});
      const TensorView wv = dense_view(w.get(), DType::kBFloat16, {cols});
      const TensorView yv = dense_view(at(y), DType::kBFloat16, {rows, cols});
      const TensorView sv = dense_view(at(s), DType::kBFloat16, {rows, cols});
      const auto span = [&](const DeviceBuffer& b) {
        std::vector<uint16_t> all = download<uint16_t>(b, n + offset);
        return std::vector<uint16_t>(all.begin() + offset, all.end());
      };
      for (const int read_back : {1, 0}) {
        SCOPED_TRACE(testing::Message() << "read_back_second " << read_back);
        const ScopedTuning knob("read_back_second", read_back);
        upload(x, xs);
        upload(r, rs);
        Status status = add_rms_norm(xv, rv, NormShape::of({cols}), &wv, 1e-6, yv, sv, nullptr, nullptr);
        ASSERT_TRUE(status.is_ok()) << status.message();
        const std::vector<uint16_t> want_y = span(y), want_s = span(s);
        status = add_rms_norm(xv, rv, NormShape::of({cols}), &wv, 1e-6, xv, rv, nullptr, nullptr);
        ASSERT_TRUE(status.is_ok()) << status.message();
        EXPECT_EQ(span(x), want_y) << "y in place of x";
        EXPECT_EQ(span(r), want_s) << "s in place of the residual";
      }
    }
  }
}

// Split rows (16-bit rows of 2^20 elements on chip; float32 and float64 re-read by default and on
// chip with the planner's knob widened):
// every forward op, with and without weight and bias, odd lengths (1000003 cuts the last chunk
// mid-vector), unaligned rows, and more chunks than the grid's CTAs take at once (12 rows x 32).
TEST_F(NormGpu, SplitRows) {
  const int64_t mega = 1 << 20, prime = 1000003;
  check_forward<__nv_bfloat16, float>({Kind::kLayer, false, true, true, "large_mean", true}, {3, mega, mega, 0}, 81);
  check_forward<__half, __half>({Kind::kRms, false, true, false, "constant", true}, {4, prime, prime + 5, 3}, 82);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, true, false, false, "randn", true}, {2, prime, prime, 0},
                                              83);
  check_forward<__half, float>({Kind::kRms, true, true, false, "randn", true}, {3, mega, mega + 8, 0}, 84);
  check_forward<__nv_bfloat16, float>({Kind::kRms, false, true, false, "randn", true}, {12, mega, mega, 0}, 85);
  // Re-read splits (RowSplitConfig::reread): float32 and float64 rows of 4-8 MiB by default (the
  // residual form reads two inputs), 16-bit ones with the on-chip split off and the threshold at
  // 2 MiB; more chunks than the grid's CTAs (12 rows x 32).
  check_forward<float, float>({Kind::kLayer, false, true, true, "large_mean", true}, {3, mega, mega, 0}, 88);
  check_forward<float, float>({Kind::kRms, true, true, true, "randn", true}, {2, prime, prime + 5, 1}, 89);
  check_forward<double, double>({Kind::kLayer, false, true, false, "step", true}, {2, mega, mega, 0}, 90);
  {
    const ScopedTuning no_on_chip("split_max_elem_bytes", 1);
    const ScopedTuning reread("split_reread_from_bytes", int64_t(2) << 20);
    check_forward<__nv_bfloat16, float>({Kind::kRms, false, true, true, "randn", true}, {12, mega, mega, 0}, 91);
    check_forward<__half, __half>({Kind::kLayer, true, true, true, "constant", true}, {3, mega + 3, mega + 3, 0}, 92);
  }
  const ScopedTuning every_dtype("split_max_elem_bytes", 8);
  check_forward<float, float>({Kind::kLayer, false, true, true, "randn", true}, {3, mega, mega, 0}, 86);
  // float64 with a residual: 192 KB chunks (one 32 KB tile each), one CTA an SM; 300007 columns
  // make 74 chunks, within the grid (1000003 would be 245, past it: no split).
  check_forward<double, double>({Kind::kRms, true, true, false, "randn", true}, {2, 300007, 300007, 1}, 87);
}

// normalized_shape over two dims of a rank-3 tensor gives the rows of its flattening.
TEST_F(NormGpu, MultiDimNormalizedShape) {
  const int64_t a = 7, b = 13, c = 29, cols = b * c;
  std::vector<double> x = rounded<float>(make_values(a * cols, "randn", 5)), w = make_values(cols, "randn", 6);
  std::vector<double> want(a * cols), mean(a), rstd(a);
  reference::layer_norm_forward(x.data(), w.data(), nullptr, want.data(), mean.data(), rstd.data(), a, cols, 1e-5);
  DeviceBuffer dx(x.size() * 4), dy(x.size() * 4), dw(cols * 4);
  upload(dx, cast_to<float>(x));
  upload(dw, cast_to<float>(w));
  const TensorView xv = dense_view(dx.get(), DType::kFloat32, {a, b, c}),
                   yv = dense_view(dy.get(), DType::kFloat32, {a, b, c}),
                   wv = dense_view(dw.get(), DType::kFloat32, {b, c});
  const Status s = layer_norm(xv, NormShape::of({b, c}), &wv, nullptr, 1e-5, yv, nullptr, nullptr, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const std::vector<float> got = download<float>(dy, x.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(close_enough<float>(got[i], want[i], 8.0)) << i;
}

// Forward results are bitwise the same for a row alone and inside a batch, and across runs.
TEST_F(NormGpu, DeterministicAndBatchInvariant) {
  for (int64_t cols : {1000, 4096, 32768, 262144}) {
    SCOPED_TRACE(testing::Message() << "cols=" << cols);
    const int64_t rows = cols >= 262144 ? 24 : cols >= 32768 ? 512 : 2048;
    const std::vector<double> values = make_values(rows * cols, "randn", 9);
    DeviceBuffer x(rows * cols * 2), y(rows * cols * 2), w(cols * 4), b(cols * 4);
    upload(x, cast_to<__nv_bfloat16>(values));
    upload(w, cast_to<float>(make_values(cols, "randn", 10)));
    upload(b, cast_to<float>(make_values(cols, "randn", 11)));
    const TensorView wv = dense_view(w.get(), DType::kFloat32, {cols}), bv = dense_view(b.get(), DType::kFloat32, {cols});
    auto run_rows = [&](int64_t first, int64_t count) {
      const TensorView xv = dense_view(static_cast<__nv_bfloat16*>(x.get()) + first * cols, DType::kBFloat16, {count, cols});
      const TensorView yv = dense_view(y.get(), DType::kBFloat16, {count, cols});
      EXPECT_TRUE(layer_norm(xv, NormShape::of({cols}), &wv, &bv, 1e-5, yv, nullptr, nullptr, nullptr).is_ok());
      std::vector<uint16_t> out(count * cols);
      EXPECT_EQ(cudaMemcpy(out.data(), y.get(), out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      return out;
    };
    const std::vector<uint16_t> batch = run_rows(0, rows);
    EXPECT_EQ(batch, run_rows(0, rows)) << "two runs differ";
    for (int64_t r : {int64_t(0), rows / 2 + 1, rows - 1}) {
      const std::vector<uint16_t> alone = run_rows(r, 1);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + r * cols))
          << "row " << r << " alone differs from the same row in the batch";
    }
  }
}

// layer_norm on staged rows (norm_staged.cuh's Chan fold; layer_norm ships no band, so the knobs
// set one: rows of 16 to 880 KiB, 110 KiB shares): one CTA and clusters of 2 to 8, whole and ragged
// lengths, shifted rows, parameters on and off, large means, constant rows (variance 0) and a step
// against the oracle; then a row alone, in a batch and one element off its granule, bit for bit.
TEST_F(NormGpu, LayerNormStagedRows) {
  const ScopedTuning lo("staged0_min_bytes", 16384), hi("staged0_max_bytes", 880 * 1024),
      threads("staged0_threads", 512), share("staged0_share_bytes", 110 * 1024);
  check_forward<float, float>({Kind::kLayer, false, true, true, "randn"}, {3, 50257, 50257, 0}, 701);
  check_forward<float, float>({Kind::kLayer, false, true, false, "large_mean"}, {3, 50264, 50267, 1}, 702);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, false, true, true, "randn"}, {4, 50257, 50264, 3}, 703);
  check_forward<__nv_bfloat16, float>({Kind::kLayer, false, false, false, "constant"}, {4, 11011, 11011, 0}, 704);
  check_forward<__half, __half>({Kind::kLayer, false, true, true, "large_mean"}, {2, 131075, 131080, 5}, 705);
  check_forward<float, float>({Kind::kLayer, false, true, true, "step"}, {2, 200003, 200003, 0}, 706);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kLayer, false, true, true, "randn"}, {3, 8193, 8193, 1}, 707);
  const int64_t rows = 9, cols = 50257;
  const std::vector<double> values = make_values((rows + 1) * cols, "randn", 708);
  DeviceBuffer x((rows + 1) * cols * 2), y(rows * cols * 2);
  upload(x, cast_to<__nv_bfloat16>(values));
  auto run_rows = [&](const DeviceBuffer& from, int64_t first, int64_t count, int64_t shift) {
    const TensorView xv =
        dense_view(static_cast<__nv_bfloat16*>(from.get()) + first * cols + shift, DType::kBFloat16, {count, cols});
    const TensorView yv = dense_view(y.get(), DType::kBFloat16, {count, cols});
    EXPECT_TRUE(layer_norm(xv, NormShape::of({cols}), nullptr, nullptr, 1e-5, yv, nullptr, nullptr, nullptr).is_ok());
    std::vector<uint16_t> out(count * cols);
    EXPECT_EQ(cudaMemcpy(out.data(), y.get(), out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  };
  const std::vector<uint16_t> batch = run_rows(x, 0, rows, 0);
  EXPECT_EQ(batch, run_rows(x, 0, rows, 0)) << "two runs differ";
  for (int64_t r : {int64_t(0), int64_t(4), rows - 1}) {
    const std::vector<uint16_t> alone = run_rows(x, r, 1, 0);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + r * cols)) << "row " << r << " alone differs";
  }
  // The same rows one element on (every row's alignment flipped).
  DeviceBuffer xs((rows + 1) * cols * 2);
  std::vector<double> shifted(values.size(), 0.0);
  std::copy(values.begin(), values.begin() + rows * cols, shifted.begin() + 1);
  upload(xs, cast_to<__nv_bfloat16>(shifted));
  EXPECT_EQ(batch, run_rows(xs, 0, rows, 1)) << "rows off their granules differ";

  // 16-bit parameters on 16-byte granules are fetched as raw granules (every other y row straddles
  // them); the same values off their granules or in float32 take the column path: the same bits,
  // for layer_norm with a bias, rms_norm with one and the plain rms_norm.
  const std::vector<double> wvals = rounded<__nv_bfloat16>(make_values(cols, "randn", 709)),
                            bvals = rounded<__nv_bfloat16>(make_values(cols, "randn", 710));
  auto with_params = [&](auto tag, int64_t shift, int form) {
    using P = decltype(tag);
    std::vector<double> wh(cols + 8, 0.0), bh(cols + 8, 0.0);
    std::copy(wvals.begin(), wvals.end(), wh.begin() + shift);
    std::copy(bvals.begin(), bvals.end(), bh.begin() + shift);
    DeviceBuffer pw(wh.size() * sizeof(P)), pb(bh.size() * sizeof(P));
    upload(pw, cast_to<P>(wh));
    upload(pb, cast_to<P>(bh));
    const TensorView wv = dense_view(static_cast<P*>(pw.get()) + shift, dtype_of<P>(), {cols});
    const TensorView bv = dense_view(static_cast<P*>(pb.get()) + shift, dtype_of<P>(), {cols});
    const TensorView xv = dense_view(x.get(), DType::kBFloat16, {rows, cols});
    const TensorView yv = dense_view(y.get(), DType::kBFloat16, {rows, cols});
    const NormShape shape = NormShape::of({cols});
    const Status status = form == 0   ? layer_norm(xv, shape, &wv, &bv, 1e-5, yv, nullptr, nullptr, nullptr)
                          : form == 1 ? rms_norm(xv, shape, &wv, &bv, 1e-5, yv, nullptr, Workspace{}, nullptr)
                                      : rms_norm(xv, shape, &wv, 1e-5, yv, nullptr, Workspace{}, nullptr);
    EXPECT_TRUE(status.is_ok()) << status.message();
    std::vector<uint16_t> out(rows * cols);
    EXPECT_EQ(cudaMemcpy(out.data(), y.get(), out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  };
  for (int form : {0, 1, 2}) {
    SCOPED_TRACE(testing::Message() << "form " << form);
    const std::vector<uint16_t> fetched = with_params(__nv_bfloat16{}, 0, form);
    EXPECT_EQ(fetched, with_params(__nv_bfloat16{}, 1, form)) << "parameters off their granules differ";
    EXPECT_EQ(fetched, with_params(float{}, 0, form)) << "float32 parameters differ";
  }
}

// The fused backward (one-row CTAs; float32 1024 and the single rows of 509 and 1017 run as
// row lanes, see BackwardRowLanes; 12800 and 40009 take the two-kernel path) with more rows
// than resident CTAs, so every CTA loops over rows and the prefetch ring wraps; M = 1 (one CTA);
// N not a multiple of the vector; sliced and unaligned rows. Against the oracle, and run twice
// (bitwise).
TEST_F(NormGpu, BackwardFusedLoopsOverRows) {
  check_backward<float, float>(Kind::kLayer, true, {3000, 1024, 1024, 0}, 501);
  check_backward<float, float>(Kind::kRms, true, {1000, 4096, 4096, 0}, 502);
  check_backward<float, float>(Kind::kLayer, false, {700, 12800, 12803, 1}, 503);  // two-kernel path, unaligned
  check_backward<__nv_bfloat16, float>(Kind::kLayer, true, {1500, 4099, 4099 + 5, 3}, 504);
  check_backward<__half, __half>(Kind::kRms, true, {1200, 8192, 8192, 0}, 505);
  check_backward<double, double>(Kind::kLayer, true, {1100, 2045, 2045, 0}, 506);
  for (int64_t cols : {509, 1017, 2049, 4096, 8192, 12800, 40009})
    check_backward<__nv_bfloat16, float>(Kind::kLayer, true, {1, cols, cols, 0}, 507);
}

// rms_norm's optional bias on every path: forward split rows (plain and fused residual), staged
// rows with y on and off its vectors; backward dbias from the fused kernel's one-row CTAs and row
// lanes (single rows too) and from the two-kernel path. Each check also runs twice (bitwise).
TEST_F(NormGpu, RmsNormBiasEveryPath) {
  const int64_t mega = 1 << 20, prime = 1000003;
  check_forward<__nv_bfloat16, float>({Kind::kRms, false, true, true, "randn", true}, {3, mega, mega, 0}, 601);
  check_forward<__half, __half>({Kind::kRms, true, true, true, "constant", true}, {3, prime, prime + 5, 3}, 602);
  check_forward<__nv_bfloat16, __nv_bfloat16>({Kind::kRms, false, true, true, "randn"}, {4, 131072, 131080, 3}, 603);
  check_forward<float, float>({Kind::kRms, false, true, true, "large_mean"}, {4, 40009, 40009, 0}, 604);
  check_forward<__half, float>({Kind::kRms, false, false, true, "randn"}, {300, 64, 64, 0}, 605);
  check_backward<float, float>(Kind::kRms, true, {1000, 4096, 4096, 0}, 611, true);
  check_backward<__nv_bfloat16, float>(Kind::kRms, true, {1500, 4099, 4099 + 5, 3}, 612, true);
  check_backward<float, float>(Kind::kRms, false, {700, 12800, 12803, 1}, 613, true);  // two-kernel path
  check_backward<__half, __half>(Kind::kRms, true, {3000, 64, 64, 0}, 614, true);      // row lanes
  check_backward<double, double>(Kind::kRms, true, {1100, 2045, 2045, 0}, 615, true);
  for (int64_t cols : {509, 1017, 2049, 40009})
    check_backward<__nv_bfloat16, float>(Kind::kRms, true, {1, cols, cols, 0}, 616, true);
}

// Bitwise: dx of a row alone equals dx of that row in the batch (batch invariance); dx with and
// without dweight/dbias, dweight/dbias with and without dx, dweight without dbias, in-place dx
// (dx = dy), unaligned rows and a second run all give the same bits.
template <typename T, typename P> void check_backward_bits(Kind kind, int64_t rows, int64_t cols) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool layer = kind == Kind::kLayer;
  SCOPED_TRACE(testing::Message() << (layer ? "layer_norm" : "rms_norm") << " x " << dtype_name(dtype_of<T>())
                                  << " rows=" << rows << " cols=" << cols);
  const std::vector<double> x = make_values(rows * cols, "randn", 21), dy = make_values(rows * cols, "randn", 22),
                            w = make_values(cols, "randn", 23), m = make_values(rows, "randn", 24);
  std::vector<double> mean(rows), rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    mean[r] = 0.1 * m[r];
    rstd[r] = 1.0 + 0.25 * std::fabs(m[(r + 1) % rows]);
  }
  DeviceBuffer dw_in(cols * sizeof(P));
  upload(dw_in, cast_to<P>(w));
  const TensorView wv = dense_view(dw_in.get(), dtype_of<P>(), {cols});

  struct Out {
    std::vector<T> dx;
    std::vector<P> dw, db;
  };
  // Rows [first, first + count) at element offset `shift` of fresh buffers.
  auto run = [&](int64_t first, int64_t count, int64_t shift, bool want_dx, bool want_params, bool in_place,
                 bool want_db = true) {
    const int64_t n = count * cols;
    DeviceBuffer bx((n + shift) * sizeof(T)), bdy((n + shift) * sizeof(T)), bdx((n + shift) * sizeof(T)),
        bmean(count * sizeof(Acc)), brstd(count * sizeof(Acc)), bgw(cols * sizeof(P)), bgb(cols * sizeof(P));
    auto put_rows = [&](const DeviceBuffer& b, const std::vector<double>& v) {
      std::vector<T> image(n + shift, from_double<T>(0.0));
      for (int64_t i = 0; i < n; ++i) image[shift + i] = from_double<T>(v[first * cols + i]);
      upload(b, image);
    };
    put_rows(bx, x);
    put_rows(bdy, dy);
    upload(bdx, std::vector<T>(n + shift, from_double<T>(kNaN)));
    upload(bmean, cast_to<Acc>(std::vector<double>(mean.begin() + first, mean.begin() + first + count)));
    upload(brstd, cast_to<Acc>(std::vector<double>(rstd.begin() + first, rstd.begin() + first + count)));
    upload(bgw, std::vector<P>(cols, from_double<P>(kNaN)));
    upload(bgb, std::vector<P>(cols, from_double<P>(kNaN)));
    auto at = [&](const DeviceBuffer& b) { return static_cast<T*>(b.get()) + shift; };
    const TensorView xv = dense_view(at(bx), dtype_of<T>(), {count, cols}),
                     dyv = dense_view(at(bdy), dtype_of<T>(), {count, cols}),
                     dxv = dense_view(at(in_place ? bdy : bdx), dtype_of<T>(), {count, cols}),
                     mv = dense_view(bmean.get(), dtype_of<Acc>(), {count}),
                     rv = dense_view(brstd.get(), dtype_of<Acc>(), {count}),
                     gwv = dense_view(bgw.get(), dtype_of<P>(), {cols}), gbv = dense_view(bgb.get(), dtype_of<P>(), {cols});
    NormRequirements ws_req;
    EXPECT_TRUE(norm_backward_requirements(xv, NormShape::of({cols}), &ws_req).is_ok());
    const std::size_t ws_bytes = ws_req.workspace_bytes;
    DeviceBuffer ws(ws_bytes);
    const Workspace wsv{want_params ? ws.get() : nullptr, want_params ? ws_bytes : 0};
    const Status s = layer ? layer_norm_backward(dyv, xv, NormShape::of({cols}), mv, rv, &wv, want_dx ? &dxv : nullptr,
                                                 want_params ? &gwv : nullptr, want_params && want_db ? &gbv : nullptr,
                                                 wsv, nullptr)
                           : rms_norm_backward(dyv, xv, NormShape::of({cols}), rv, &wv, want_dx ? &dxv : nullptr,
                                               want_params ? &gwv : nullptr, wsv, nullptr);
    EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Out o;
    if (want_dx) {
      o.dx = download<T>(in_place ? bdy : bdx, n + shift);
      o.dx.erase(o.dx.begin(), o.dx.begin() + shift);
    }
    if (want_params) {
      o.dw = download<P>(bgw, cols);
      if (layer && want_db) o.db = download<P>(bgb, cols);
    }
    return o;
  };
  auto same = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  const Out full = run(0, rows, 0, true, true, false);
  for (const auto& [name, o] : {std::pair<const char*, Out>{"second run", run(0, rows, 0, true, true, false)},
                                {"in-place dx", run(0, rows, 0, true, true, true)},
                                {"unaligned rows", run(0, rows, 1, true, true, false)}}) {
    EXPECT_TRUE(same(o.dx, full.dx)) << name << ": dx differs";
    EXPECT_TRUE(same(o.dw, full.dw)) << name << ": dweight differs";
    EXPECT_TRUE(same(o.db, full.db)) << name << ": dbias differs";
  }
  EXPECT_TRUE(same(run(0, rows, 0, true, false, false).dx, full.dx)) << "dx without dweight differs";
  const Out params_only = run(0, rows, 0, false, true, false);
  EXPECT_TRUE(same(params_only.dw, full.dw)) << "dweight without dx differs";
  EXPECT_TRUE(same(params_only.db, full.db)) << "dbias without dx differs";
  if (layer) {
    const Out no_db = run(0, rows, 0, true, true, false, false);
    EXPECT_TRUE(same(no_db.dx, full.dx)) << "dx without dbias differs";
    EXPECT_TRUE(same(no_db.dw, full.dw)) << "dweight without dbias differs";
  }
  for (int64_t r : {int64_t(0), rows / 2 + 1, rows - 1}) {
    const Out alone = run(r, 1, 0, true, true, false);
    EXPECT_TRUE(std::equal(alone.dx.begin(), alone.dx.end(), full.dx.begin() + r * cols,
                           [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }))
        << "row " << r << ": dx alone differs from dx in the batch";
  }
}

TEST_F(NormGpu, BackwardBitwiseAcrossBatchesPathsAndLayouts) {
  check_backward_bits<float, float>(Kind::kLayer, 1500, 4096);
  check_backward_bits<float, float>(Kind::kRms, 700, 12800);               // two-kernel path
  check_backward_bits<__nv_bfloat16, float>(Kind::kLayer, 2000, 1024);     // 4 rows of 128 threads a CTA
  check_backward_bits<__nv_bfloat16, float>(Kind::kLayer, 700, 8192);
  check_backward_bits<__half, __half>(Kind::kRms, 900, 4099);
  check_backward_bits<double, double>(Kind::kLayer, 800, 4096);
  check_backward_bits<float, float>(Kind::kLayer, 8, 262144);              // two-kernel path
  check_backward_bits<float, float>(Kind::kLayer, 300, 100);               // 32 rows of 16 lanes a CTA
}

// Rows enough for every resident CTA of cols' layout to take at least two steps of R rows (so
// the prefetch ring wraps), whatever the occupancy: kFusedMaxCtasPerSm CTAs an SM at most.
int64_t rows_past_resident(int64_t cols, int elem_bytes) {
  const FusedNormBackwardLayout l = plan_fused_norm_backward(cols, elem_bytes, fused_max_vpt(elem_bytes));
  int device = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return int64_t(kFusedMaxCtasPerSm) * sms * l.rows_per_cta * 2 + 3;
}

// Short rows on the row-lane kernels (R rows side by side a CTA, S = 4 .. 256 threads a row):
// lengths covering every S (part of a vector, of a sub-group, of a warp), the ring wrapping,
// sub-groups past the last row, sliced (aligned and unaligned) rows, with and without weight,
// every dtype, layer and rms. Against the float64 oracle, run twice (bitwise).
template <typename T, typename P> void row_lanes_sweep(Kind kind) {
  uint32_t seed = 700;
  for (int64_t cols : {1, 3, 33, 100, 200, 300, 513, 1000, 2045}) {
    const int64_t rows = rows_past_resident(cols, sizeof(T));
    const int64_t wide = (cols + 63) / 64 * 64 + 64;
    check_backward<T, P>(kind, true, {rows, cols, cols, 0}, seed++);
    check_backward<T, P>(kind, false, {rows / 3, cols, wide, 0}, seed++);
    check_backward<T, P>(kind, true, {rows / 5, cols, cols + 3, 1}, seed++);
    check_backward<T, P>(kind, true, {1, cols, cols, 0}, seed++);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_F(NormGpu, BackwardRowLanesFloat32) {
  row_lanes_sweep<float, float>(Kind::kLayer);
  row_lanes_sweep<float, float>(Kind::kRms);
}
TEST_F(NormGpu, BackwardRowLanesBFloat16) {
  row_lanes_sweep<__nv_bfloat16, float>(Kind::kLayer);
  row_lanes_sweep<__nv_bfloat16, __nv_bfloat16>(Kind::kRms);
}
TEST_F(NormGpu, BackwardRowLanesFloat16) {
  row_lanes_sweep<__half, __half>(Kind::kLayer);
  row_lanes_sweep<__half, float>(Kind::kRms);
}
TEST_F(NormGpu, BackwardRowLanesFloat64) {
  row_lanes_sweep<double, double>(Kind::kLayer);
  row_lanes_sweep<double, double>(Kind::kRms);
}

// Row lanes, bitwise: a row alone vs the same row among 4096 (batch invariance of dx), two runs,
// in-place and unaligned dx, dweight/dbias with and without dx (check_backward_bits), at every S.
TEST_F(NormGpu, BackwardRowLanesBitwise) {
  for (int64_t cols : {1, 3, 33, 100, 128, 200, 300, 512, 513, 1024, 2048}) {
    check_backward_bits<__nv_bfloat16, float>(Kind::kLayer, 4096, cols);
    check_backward_bits<float, float>(Kind::kRms, 4096, cols);
    if (HasFailure()) return;
  }
  check_backward_bits<__half, __half>(Kind::kLayer, 4096, 100);
  check_backward_bits<double, double>(Kind::kLayer, 4096, 1000);
  check_backward_bits<double, double>(Kind::kRms, 4096, 7);
}

// Bad input: a Status naming the argument, nothing written.
TEST_F(NormGpu, Errors) {
  const int64_t rows = 4, cols = 8;
  DeviceBuffer x(rows * cols * 4), y(rows * cols * 4), w(cols * 8), stats(rows * 8), ws(1 << 16);
  upload(y, std::vector<float>(rows * cols, float(kNaN)));
  const TensorView xv = dense_view(x.get(), DType::kFloat32, {rows, cols}), yv = dense_view(y.get(), DType::kFloat32, {rows, cols});
  const TensorView w_ok = dense_view(w.get(), DType::kFloat32, {cols});
  const TensorView w_short = dense_view(w.get(), DType::kFloat32, {cols - 1});
  const TensorView w_f64 = dense_view(w.get(), DType::kFloat64, {cols});
  const TensorView rstd_f64 = dense_view(stats.get(), DType::kFloat64, {rows});
  const TensorView rstd_short = dense_view(stats.get(), DType::kFloat32, {rows - 1});
  auto expect_error = [&](const Status& s, const std::string& prefix) {
    EXPECT_FALSE(s.is_ok());
    EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << s.message();
  };
  expect_error(layer_norm(xv, NormShape::of({cols + 1}), nullptr, nullptr, 1e-5, yv, nullptr, nullptr, nullptr),
               "normalized_shape:");
  expect_error(layer_norm(xv, NormShape::of({2, rows, cols}), nullptr, nullptr, 1e-5, yv, nullptr, nullptr, nullptr),
               "normalized_shape:");
  expect_error(layer_norm(xv, NormShape::of({}), nullptr, nullptr, 1e-5, yv, nullptr, nullptr, nullptr),
               "normalized_shape:");
  expect_error(layer_norm(xv, NormShape::of({cols}), &w_short, nullptr, 1e-5, yv, nullptr, nullptr, nullptr), "weight:");
  expect_error(rms_norm(xv, NormShape::of({cols}), &w_f64, 1e-5, yv, nullptr, nullptr), "weight:");
  expect_error(layer_norm(xv, NormShape::of({cols}), &w_ok, &w_short, 1e-5, yv, nullptr, nullptr, nullptr), "bias:");
  expect_error(rms_norm(xv, NormShape::of({cols}), nullptr, 1e-5, yv, &rstd_f64, nullptr), "rstd:");
  expect_error(rms_norm(xv, NormShape::of({cols}), nullptr, 1e-5, yv, &rstd_short, nullptr), "rstd:");
  expect_error(rms_norm(xv, NormShape::of({cols}), nullptr, -1.0, yv, nullptr, nullptr), "eps:");
  const TensorView y_wrong = dense_view(y.get(), DType::kFloat32, {rows, cols - 1});
  expect_error(rms_norm(xv, NormShape::of({cols}), nullptr, 1e-5, y_wrong, nullptr, nullptr), "y:");
  TensorView host = xv;
  host.device = kHostDevice;
  expect_error(rms_norm(host, NormShape::of({cols}), nullptr, 1e-5, yv, nullptr, nullptr), "x:");
  const TensorView rstd_ok = dense_view(stats.get(), DType::kFloat32, {rows});
  const TensorView dw = dense_view(w.get(), DType::kFloat32, {cols});
  expect_error(rms_norm_backward(yv, xv, NormShape::of({cols}), rstd_ok, nullptr, nullptr, &dw, {nullptr, 0}, nullptr),
               "workspace:");
  expect_error(layer_norm_backward(yv, xv, NormShape::of({cols}), rstd_ok, rstd_ok, &w_short, nullptr, nullptr,
                                   nullptr, {ws.get(), ws.bytes()}, nullptr),
               "weight:");
  // rms_norm's bias: checked as layer_norm's (shape, weight's dtype), and dbias likewise.
  DeviceBuffer bias_buffer(cols * 8);
  const TensorView b_short = dense_view(bias_buffer.get(), DType::kFloat32, {cols - 1});
  const TensorView b_f64 = dense_view(bias_buffer.get(), DType::kFloat64, {cols});
  expect_error(rms_norm(xv, NormShape::of({cols}), &w_ok, &b_short, 1e-5, yv, nullptr, nullptr), "bias:");
  expect_error(rms_norm(xv, NormShape::of({cols}), nullptr, &b_f64, 1e-5, yv, nullptr, nullptr), "bias:");
  DeviceBuffer res(rows * cols * 4), sum(rows * cols * 4);
  const TensorView rv = dense_view(res.get(), DType::kFloat32, {rows, cols}),
                   sv = dense_view(sum.get(), DType::kFloat32, {rows, cols});
  expect_error(add_rms_norm(xv, rv, NormShape::of({cols}), &w_ok, &b_short, 1e-5, yv, sv, nullptr, nullptr), "bias:");
  expect_error(rms_norm_backward(yv, xv, NormShape::of({cols}), rstd_ok, nullptr, nullptr, &dw, &b_short,
                                 {ws.get(), ws.bytes()}, nullptr),
               "dbias:");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (float v : download<float>(y, rows * cols)) ASSERT_TRUE(std::isnan(v)) << "a failed call wrote y";
}

}  // namespace
}  // namespace reducekit
