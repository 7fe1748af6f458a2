// SPDX-License-Identifier: Apache-2.0
// GPU tests of batch_norm (training and inference forward, backward) against the float64 CPU
// oracle in every dtype and both layouts; bitwise determinism, empty batches, argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "reducekit/batch_norm.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

constexpr double kEps = 1e-5, kMomentum = 0.1;
constexpr int64_t kGuard = 16;  // poisoned elements past every output, which must stay poisoned

enum Flag : unsigned {
  kChannelsLast = 1, kNoWeight = 2, kNoBias = 4,
  kNoRunning = 8,     // training without running statistics; inference without save outputs
  kFrozenStats = 16,  // backward with batch_statistics = false
  kNoDx = 32, kNoDweight = 64, kNoDbias = 128,
  kOffset = 256,         // x, y, dy, dx one element past an aligned address (a sliced tensor)
  kOffsetOutputs = 512,  // y, dy, dx one element off, x aligned: each tensor's own alignment counts
};

struct Case {
  std::vector<int64_t> sizes;
  unsigned flags = 0;
  bool has(unsigned f) const { return (flags & f) != 0; }
  int64_t hw() const { return std::accumulate(sizes.begin() + 2, sizes.end(), int64_t(1), std::multiplies<>()); }
};

// x's view: contiguous, or channels-last (C innermost, then the spatial dims, then N; for NCHW
// the strides {H*W*C, 1, W*C, C}).
TensorView x_view(void* data, DType dtype, const std::vector<int64_t>& sizes, bool channels_last) {
  TensorView v;
  v.data = data, v.dtype = dtype, v.device = 0, v.rank = static_cast<int>(sizes.size());
  std::vector<int> inner_first;  // dims from the innermost out
  if (channels_last) inner_first.push_back(1);
  for (int d = v.rank - 1; d >= 0; --d)
    if (!channels_last || d != 1) inner_first.push_back(d);
  int64_t stride = 1;
  for (int d : inner_first) {
    v.sizes[d] = sizes[d];
    v.strides[d] = stride;
    stride *= sizes[d];
  }
  return v;
}

TensorView channel_view(const DeviceBuffer& b, DType dtype, int64_t c) {
  return make_contiguous_view(b.get(), dtype, {c}, 0);
}

std::vector<unsigned char> raw(const DeviceBuffer& b) {
  std::vector<unsigned char> out(b.bytes());
  EXPECT_EQ(cudaMemcpy(out.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}
template <typename A> A at(const std::vector<unsigned char>& image, int64_t i) {
  A v;
  std::memcpy(&v, image.data() + i * sizeof(A), sizeof(A));
  return v;
}
template <typename A> void upload(const DeviceBuffer& b, const std::vector<double>& v) {
  std::vector<A> host(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) host[i] = from_double<A>(v[i]);
  EXPECT_EQ(cudaMemcpy(b.get(), host.data(), host.size() * sizeof(A), cudaMemcpyHostToDevice), cudaSuccess);
}
// All-ones bytes: a NaN in every dtype.
void poison(const DeviceBuffer& b) { EXPECT_EQ(cudaMemset(b.get(), 0xff, b.bytes()), cudaSuccess); }
bool poisoned(const std::vector<unsigned char>& image, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to && i < image.size(); ++i)
    if (image[i] != 0xff) return false;
  return true;
}

// Rounds through A (the dtype a value is stored in on the device).
template <typename A> double rnd(double v) { return to_double(from_double<A>(v)); }

// One case in dtype T: inference forward, training forward and backward, run twice on one
// workspace zeroed once; results against the oracle, the second run bit for bit the first.
template <typename T> void check_case(const Case& k, uint32_t seed) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t n = k.sizes[0], c = k.sizes[1], hw = k.hw(), numel = n * c * hw;
  // Element offsets of x and of the others (y, dy, dx) in their buffers.
  const int64_t xoff = k.has(kOffset) ? 1 : 0, off = k.has(kOffset | kOffsetOutputs) ? 1 : 0;
  const int64_t span = numel + 1 + kGuard;
  const bool last = k.has(kChannelsLast);
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " [" << n << ", " << c << ", ...] rank "
                                  << k.sizes.size() << " hw " << hw << " flags " << k.flags);
  // Memory index of element (i, ch, j) of [n, c, hw], from the tensor's first element.
  const auto mem = [&](int64_t i, int64_t ch, int64_t j) {
    return last ? (i * hw + j) * c + ch : (i * c + ch) * hw + j;
  };
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 1.5);
  std::vector<double> x(numel), dy(numel), w(c), b(c), rm(c), rv(c);
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t ch = (i / hw) % c;  // a mean and scale of its own per channel
    x[i] = rnd<T>(3.0 + ch % 13 + (0.5 + 0.25 * (ch % 5)) * normal(gen));
    dy[i] = rnd<T>(normal(gen));
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    w[ch] = rnd<Acc>(1.0 + 0.5 * normal(gen)), b[ch] = rnd<Acc>(normal(gen));
    rm[ch] = rnd<Acc>(3.0 + normal(gen)), rv[ch] = rnd<Acc>(uniform(gen));
  }
  const double* wp = k.has(kNoWeight) ? nullptr : w.data();
  const double* bp = k.has(kNoBias) ? nullptr : b.data();

  std::vector<double> want_y(numel), want_mean(c), want_invstd(c), want_rm(rm), want_rv(rv), want_inf(numel);
  ASSERT_TRUE(reference::batch_norm_train_forward(x.data(), wp, bp, want_y.data(), want_mean.data(), want_invstd.data(),
                                                  want_rm.data(), want_rv.data(), n, c, hw, kMomentum, kEps));
  reference::batch_norm_inference_forward(x.data(), wp, bp, rm.data(), rv.data(), want_inf.data(), n, c, hw, kEps);

  // Device images of x and dy, in memory order.
  std::vector<double> x_mem(span, 0.0), dy_mem(span, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < hw; ++j) {
        x_mem[xoff + mem(i, ch, j)] = x[(i * c + ch) * hw + j];
        dy_mem[off + mem(i, ch, j)] = dy[(i * c + ch) * hw + j];
      }
  const std::size_t tb = sizeof(T), ab = sizeof(Acc), cb = (c + kGuard) * ab;
  DeviceBuffer dxin(span * tb), ddy(span * tb), dy_out(span * tb), dinf(span * tb), ddx(span * tb);
  DeviceBuffer dw(cb), db(cb), drm(cb), drv(cb), dsm(cb), dsi(cb), dism(cb), disi(cb), dgw(cb), dgb(cb);
  upload<T>(dxin, x_mem), upload<T>(ddy, dy_mem), upload<Acc>(dw, w), upload<Acc>(db, b);
  const DType dt = dtype_of<T>(), at_ = dtype_of<Acc>();
  const auto big = [&](const DeviceBuffer& buf, int64_t o) {
    return x_view(static_cast<T*>(buf.get()) + o, dt, k.sizes, last);
  };
  const TensorView xv = big(dxin, xoff), dyv = big(ddy, off), yv = big(dy_out, off), infv = big(dinf, off),
                   dxv = big(ddx, off);
  const TensorView wv = channel_view(dw, at_, c), bv = channel_view(db, at_, c), rmv = channel_view(drm, at_, c),
                   rvv = channel_view(drv, at_, c), smv = channel_view(dsm, at_, c), siv = channel_view(dsi, at_, c),
                   ismv = channel_view(dism, at_, c), isiv = channel_view(disi, at_, c),
                   gwv = channel_view(dgw, at_, c), gbv = channel_view(dgb, at_, c);

  BatchNormRequirements req;
  Status s = batch_norm_requirements(xv, &req);
  ASSERT_TRUE(s.is_ok()) << s.message();
  // No tickets or counters: nothing of the workspace needs zeroing.
  ASSERT_EQ(req.workspace_zeroed_bytes, 0u);
  ASSERT_GT(req.workspace_bytes, 0u);
  DeviceBuffer ws(req.workspace_bytes);
  // Stale partials must not matter: the workspace starts as NaN.
  REDUCEKIT_CUDA_OK(cudaMemset(ws.get(), 0xff, req.workspace_bytes));

  const BatchNormOptions opts{kMomentum, kEps};
  const bool running = !k.has(kNoRunning);
  const std::vector<const DeviceBuffer*> outputs = {&dy_out, &dinf, &ddx,  &dsm, &dsi, &drm,
                                                    &drv,    &dism, &disi, &dgw, &dgb};
  const auto run_all = [&]() {
    for (const DeviceBuffer* o : outputs) poison(*o);
    upload<Acc>(drm, rm);
    upload<Acc>(drv, rv);
    // Inference first: the training forward then updates the running statistics.
    Status st = batch_norm_inference_forward(xv, wp ? &wv : nullptr, bp ? &bv : nullptr, rmv, rvv, kEps, infv,
                                             running ? &ismv : nullptr, running ? &isiv : nullptr, nullptr);
    EXPECT_TRUE(st.is_ok()) << st.message();
    st = batch_norm_training_forward(xv, wp ? &wv : nullptr, bp ? &bv : nullptr, running ? &rmv : nullptr,
                                     running ? &rvv : nullptr, opts, yv, smv, siv, {ws.get(), req.workspace_bytes},
                                     nullptr);
    EXPECT_TRUE(st.is_ok()) << st.message();
    st = batch_norm_backward(dyv, xv, wp ? &wv : nullptr, smv, siv, !k.has(kFrozenStats), k.has(kNoDx) ? nullptr : &dxv,
                             k.has(kNoDweight) ? nullptr : &gwv, k.has(kNoDbias) ? nullptr : &gbv,
                             {ws.get(), req.workspace_bytes}, nullptr);
    EXPECT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::vector<unsigned char>> images;
    for (const DeviceBuffer* o : outputs) images.push_back(raw(*o));
    return images;
  };
  const auto first = run_all();
  if (testing::Test::HasFailure()) return;
  const auto second = run_all();
  const char* names[] = {"y", "inference y", "dx", "save_mean", "save_invstd", "running_mean", "running_var",
                         "inference save_mean", "inference save_invstd", "dweight", "dbias"};
  for (std::size_t i = 0; i < first.size(); ++i)
    EXPECT_TRUE(first[i] == second[i]) << names[i] << " differs between runs";
  const auto &y_img = first[0], &inf_img = first[1], &dx_img = first[2], &sm_img = first[3], &si_img = first[4],
             &rm_img = first[5], &rv_img = first[6], &ism_img = first[7], &isi_img = first[8], &gw_img = first[9],
             &gb_img = first[10];
  for (const auto* img : {&y_img, &inf_img, &dx_img}) {
    EXPECT_TRUE(poisoned(*img, 0, off * tb)) << "written before x's first element";
    EXPECT_TRUE(poisoned(*img, (off + numel) * tb, span * tb)) << "written past x's last element";
  }
  for (const auto* img : {&sm_img, &si_img, &ism_img, &isi_img, &gw_img, &gb_img})
    EXPECT_TRUE(poisoned(*img, c * ab, cb)) << "a per-channel output written past c";

  // Backward from the statistics the device saved, so that it is checked on its own.
  std::vector<double> mean(c), invstd(c), want_dx(numel), want_dw(c), want_db(c);
  for (int64_t ch = 0; ch < c; ++ch) mean[ch] = at<Acc>(sm_img, ch), invstd[ch] = at<Acc>(si_img, ch);
  reference::batch_norm_backward(x.data(), dy.data(), mean.data(), invstd.data(), wp,
                                 k.has(kFrozenStats) ? nullptr : want_dx.data(), want_dw.data(), want_db.data(), n, c,
                                 hw);
  if (k.has(kFrozenStats))  // dx = dy * weight * invstd: the statistics are constants
    for (int64_t i = 0; i < numel; ++i) {
      const int64_t ch = (i / hw) % c;
      want_dx[i] = dy[i] * (wp ? w[ch] : 1.0) * invstd[ch];
    }

  int failures = 0;
  const auto expect = [&](bool ok, const char* what, int64_t where, double got, double want) {
    if (ok || failures >= 8) return;
    ++failures;
    ADD_FAILURE() << what << " at " << where << ": got " << got << ", want " << want;
  };
  for (int64_t ch = 0; ch < c; ++ch) {
    // The magnitudes behind each result (gpu_test_util's close_enough takes them as `scale`).
    double x_max = 0, dy_max = 0, dy_abs = 0, dyx_abs = 0, xhat_max = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const int64_t e = (i * c + ch) * hw + j;
        x_max = std::max(x_max, std::fabs(x[e]));
        xhat_max = std::max(xhat_max, std::fabs(x[e] - want_mean[ch]) * want_invstd[ch]);
        dy_max = std::max(dy_max, std::fabs(dy[e]));
        dy_abs += std::fabs(dy[e]);
        dyx_abs += std::fabs(dy[e] * x[e]) * want_invstd[ch];
      }
    const double count = static_cast<double>(n * hw);
    const double wabs = wp ? std::fabs(w[ch]) : 1.0, babs = bp ? std::fabs(b[ch]) : 0.0;
    const double cond = 1.0 + x_max * want_invstd[ch];  // |x| / std: how the rounding of x - mean grows
    const double inv_run = 1.0 / std::sqrt(rv[ch] + kEps);
    expect(close_enough<Acc>(mean[ch], want_mean[ch], x_max), "save_mean", ch, mean[ch], want_mean[ch]);
    expect(close_enough<Acc>(invstd[ch], want_invstd[ch], want_invstd[ch] * cond), "save_invstd", ch, invstd[ch],
           want_invstd[ch]);
    if (running) {
      const double got_rm = at<Acc>(rm_img, ch), got_rv = at<Acc>(rv_img, ch);
      const double var = 1.0 / (want_invstd[ch] * want_invstd[ch]);
      expect(close_enough<Acc>(got_rm, want_rm[ch], std::fabs(rm[ch]) + 0.1 * x_max), "running_mean", ch, got_rm,
             want_rm[ch]);
      expect(close_enough<Acc>(got_rv, want_rv[ch], rv[ch] + 0.2 * var * cond), "running_var", ch, got_rv, want_rv[ch]);
      const double got_im = at<Acc>(ism_img, ch), got_ii = at<Acc>(isi_img, ch);
      expect(got_im == rm[ch], "inference save_mean", ch, got_im, rm[ch]);
      expect(close_enough<Acc>(got_ii, inv_run, inv_run), "inference save_invstd", ch, got_ii, inv_run);
    } else {
      EXPECT_TRUE(poisoned(ism_img, 0, cb) && poisoned(isi_img, 0, cb)) << "inference save outputs written when null";
    }
    if (!k.has(kNoDweight)) {
      const double got = at<Acc>(gw_img, ch);
      expect(close_enough<Acc>(got, want_dw[ch], dyx_abs + dy_abs * x_max * want_invstd[ch]), "dweight", ch, got,
             want_dw[ch]);
    }
    if (!k.has(kNoDbias)) {
      const double got = at<Acc>(gb_img, ch);
      expect(close_enough<Acc>(got, want_db[ch], dy_abs), "dbias", ch, got, want_db[ch]);
    }
    const double y_scale = x_max * want_invstd[ch] * wabs + babs;
    const double inf_scale = (x_max + std::fabs(rm[ch])) * inv_run * wabs + babs;
    const double dx_scale =
        wabs * want_invstd[ch] * (dy_max + dy_abs / count + cond * (1.0 + xhat_max * dy_abs / count));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const int64_t e = (i * c + ch) * hw + j, m = off + mem(i, ch, j);
        const double gy = to_double(at<T>(y_img, m)), gi = to_double(at<T>(inf_img, m));
        expect(close_enough<T>(gy, want_y[e], y_scale), "y", e, gy, want_y[e]);
        expect(close_enough<T>(gi, want_inf[e], inf_scale), "inference y", e, gi, want_inf[e]);
        if (!k.has(kNoDx)) {
          const double gd = to_double(at<T>(dx_img, m));
          expect(close_enough<T>(gd, want_dx[e], dx_scale), "dx", e, gd, want_dx[e]);
        }
      }
  }
}

const std::vector<Case> kCases = {
    {{2, 3}},  // rank 2: [N, C] rows
    {{4, 3, 5}, kNoRunning},
    {{4, 3, 5}, kChannelsLast | kNoWeight | kNoBias},
    {{2, 3, 7, 7}},
    {{2, 3, 7, 7}, kChannelsLast | kFrozenStats},
    {{3, 16, 8, 8}, kNoBias | kFrozenStats | kNoDbias},
    {{3, 16, 8, 8}, kChannelsLast | kNoDx},
    {{3, 16, 8, 8}, kOffset | kNoWeight | kNoDweight},
    {{8, 64, 4, 4}, kChannelsLast | kNoDweight | kNoDbias},
    {{8, 64, 4, 4}, kChannelsLast | kOffset},
    {{8, 100, 3, 3}, kChannelsLast | kNoRunning},  // tiles of channels, the last one partly empty
    {{2, 5, 3, 4, 5}},
    {{3, 7, 5, 3}, kNoRunning},  // planes of 15: inference's flat vectors cross planes; a tail of 3-7
    {{4, 3, 2, 4}},              // planes of 8: one 16-bit vector, two float32 ones
    {{64, 33, 3, 3}, kNoBias},   // planes of 9: hundreds a flat inference CTA, most vectors crossing
    {{2, 5, 3, 4, 5}, kChannelsLast | kFrozenStats | kNoWeight},
    {{5, 1, 6, 6}},  // one channel
    {{5, 1, 6, 6}, kChannelsLast | kNoWeight},
    {{6, 4, 1, 1}},  // one value a position
    {{6, 4, 1, 1}, kChannelsLast | kNoBias},
    {{16, 8, 64, 64}},  // float32: single-read forward in 4-CTA clusters, three-pass backward
    {{16, 8, 64, 64}, kFrozenStats | kOffset},
    // Single read in 2-4-CTA clusters, one run cut in pieces that start off granule boundaries.
    {{1, 3, 171, 173}, kNoRunning},
    {{1, 3, 171, 173}, kOffset | kNoBias},
    // 4 MB float32 channels: past a cluster's shared memory, the three-pass kernels.
    {{2, 2, 1000, 500}},
    {{64, 32, 32, 32}, kChannelsLast},           // hundreds of chunks a tile
};

template <typename T> void check_every_case() {
  uint32_t seed = 11;
  for (const Case& k : kCases) {
    check_case<T>(k, seed++);
    if (testing::Test::HasFailure()) return;  // one failing case is enough to read
  }
}

class BatchNormGpu : public ::testing::Test {
 protected:
  void SetUp() override { REDUCEKIT_REQUIRE_GPU(); }
};

TEST_F(BatchNormGpu, Float32) { check_every_case<float>(); }
TEST_F(BatchNormGpu, Float64) { check_every_case<double>(); }
TEST_F(BatchNormGpu, Float16) { check_every_case<__half>(); }
TEST_F(BatchNormGpu, BFloat16) { check_every_case<__nv_bfloat16>(); }

// y, dy and dx one element off a 16-byte boundary while x is aligned: torch accepts such views
// (a dy sliced from a larger buffer), so the vector width must suit every tensor, not x alone.
TEST_F(BatchNormGpu, OutputsAlignedUnlikeX) {
  check_case<float>({{4, 8, 16, 16}, kOffsetOutputs}, 71);
  check_case<__nv_bfloat16>({{8, 64, 4, 4}, kChannelsLast | kOffsetOutputs | kFrozenStats}, 72);
}

// Each case in the four dtypes, a seed a case from `seed` on; stops at the first failing case.
template <std::size_t N> void check_in_every_dtype(const Case (&cases)[N], uint32_t seed) {
  for (const Case& k : cases) {
    check_case<float>(k, seed);
    check_case<__nv_bfloat16>(k, seed);
    check_case<__half>(k, seed);
    check_case<double>(k, seed++);
    if (testing::Test::HasFailure()) return;
  }
}

// Channels-first planes read as the columns of [N, C * S] (plan_batch_norm_columns; the shipped
// setting takes planes under 256 bytes, this test every plane): every output against the oracle
// as the other paths, in every dtype. {2048, 8, 2, 2}: several statistics CTAs a column; kOffset:
// falls back (misaligned).
TEST_F(BatchNormGpu, SmallPlanesAsColumns) {
  // The setting reaches the plan: the columns' partials and parameters ([C * S] rows) outgrow
  // the channels' ([C] rows) in the workspace asked for.
  DeviceBuffer probe(8 * 16 * 49 * 4);
  const TensorView xv = x_view(probe.get(), DType::kFloat32, {8, 16, 7, 7}, false);
  BatchNormRequirements off, on;
  {
    const ScopedTuning never("batch_norm_column_plane_bytes", 0);
    ASSERT_TRUE(batch_norm_requirements(xv, &off).is_ok());
  }
  const ScopedTuning columns("batch_norm_column_plane_bytes", 1 << 20);
  ASSERT_TRUE(batch_norm_requirements(xv, &on).is_ok());
  EXPECT_GE(on.workspace_bytes, std::size_t(16 * 49 * 4 * 4)) << "parameters of 784 columns";
  EXPECT_GT(on.workspace_bytes, off.workspace_bytes);
  const Case cases[] = {{{8, 16, 7, 7}},
                        {{3, 8, 5, 5}, kNoWeight | kNoRunning},
                        {{16, 24, 3, 3}, kFrozenStats},
                        {{5, 40, 2, 3}, kNoBias | kNoDweight},
                        {{2048, 8, 2, 2}},
                        {{4, 16, 7, 7}, kOffset}};
  check_in_every_dtype(cases, 81);
}

// Float32 buffers for the error and edge tests: x (1.5 throughout) and y (poisoned) of `numel`
// elements, and a zeroed workspace larger than these shapes need.
struct Small {
  explicit Small(int64_t numel)
      : x(std::vector<float>(numel + kGuard, 1.5f)), y((numel + kGuard) * 4), ws(1 << 16) {
    poison(y);
    EXPECT_EQ(cudaMemset(ws.get(), 0, ws.bytes()), cudaSuccess);
  }
  DeviceBuffer x, y, ws;
  Workspace workspace() const { return {ws.get(), ws.bytes()}; }
};

std::vector<float> floats(const DeviceBuffer& b, int64_t count) {
  std::vector<float> out(count);
  EXPECT_EQ(cudaMemcpy(out.data(), b.get(), count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void expect_error(const Status& s, StatusCode code, const std::string& name) {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message().rfind(name + ":", 0), 0u) << "the message should start with " << name << ": " << s.message();
}

TEST_F(BatchNormGpu, TrainingNeedsMoreThanOneValuePerChannel) {
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{1, 3}, {1, 4, 1, 1}, {1, 2, 1}}) {
    const int64_t c = sizes[1];
    Small t(c);
    DeviceBuffer sm(c * 4), si(c * 4);
    const TensorView xv = x_view(t.x.get(), DType::kFloat32, sizes, false);
    const TensorView yv = x_view(t.y.get(), DType::kFloat32, sizes, false);
    const Status s = batch_norm_training_forward(xv, nullptr, nullptr, nullptr, nullptr, {}, yv,
                                                 channel_view(sm, DType::kFloat32, c),
                                                 channel_view(si, DType::kFloat32, c), t.workspace(), nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find("more than 1 value per channel"), std::string::npos) << s.message();
    REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(poisoned(raw(t.y), 0, t.y.bytes())) << "y written by a rejected call";
  }
}

// N == 0: training gives NaN statistics and leaves the running ones; inference still saves its
// statistics; the backward's sums over nothing are zero.
TEST_F(BatchNormGpu, EmptyBatch) {
  const int64_t c = 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool last : {false, true}) {
    const std::vector<int64_t> sizes = {0, c, 4, 4};
    Small t(0);
    const std::vector<float> rm = {1.f, 2.f, 3.f}, rv = {0.25f, 1.f, 4.f}, zeros(c, 0.f);
    DeviceBuffer drm(rm), drv(rv), sm(zeros), si(zeros), gw(std::vector<float>(c, nan)), gb(std::vector<float>(c, nan));
    const TensorView xv = x_view(t.x.get(), DType::kFloat32, sizes, last);
    const TensorView yv = x_view(t.y.get(), DType::kFloat32, sizes, last);
    const auto cv = [&](const DeviceBuffer& b) { return channel_view(b, DType::kFloat32, c); };
    const TensorView rmv = cv(drm), rvv = cv(drv), smv = cv(sm), siv = cv(si), gwv = cv(gw), gbv = cv(gb);
    BatchNormRequirements req;
    ASSERT_TRUE(batch_norm_requirements(xv, &req).is_ok());
    ASSERT_LE(req.workspace_bytes, t.ws.bytes());
    Status s = batch_norm_training_forward(xv, nullptr, nullptr, &rmv, &rvv, {}, yv, smv, siv, t.workspace(), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    for (float v : floats(sm, c)) EXPECT_TRUE(std::isnan(v)) << "save_mean " << v;
    for (float v : floats(si, c)) EXPECT_TRUE(std::isnan(v)) << "save_invstd " << v;
    EXPECT_EQ(floats(drm, c), rm) << "running_mean changed by an empty batch";
    EXPECT_EQ(floats(drv, c), rv) << "running_var changed by an empty batch";

    s = batch_norm_inference_forward(xv, nullptr, nullptr, rmv, rvv, kEps, yv, &smv, &siv, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(floats(sm, c), rm);
    const std::vector<float> invstd = floats(si, c);
    for (int64_t ch = 0; ch < c; ++ch) EXPECT_NEAR(invstd[ch], 1.0 / std::sqrt(rv[ch] + kEps), 1e-6 * invstd[ch]);

    s = batch_norm_backward(yv, xv, nullptr, smv, siv, true, &yv, &gwv, &gbv, t.workspace(), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(floats(gw, c), zeros) << "dweight";
    EXPECT_EQ(floats(gb, c), zeros) << "dbias";
    REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  }
}

// Each bad argument is refused with a message that starts with its name; the unchanged call
// succeeds first, so every refusal below comes from the one argument changed.
TEST_F(BatchNormGpu, BadArguments) {
  const std::vector<int64_t> sizes = {2, 3, 4, 4};
  const int64_t c = 3;
  const DType f32 = DType::kFloat32;
  Small t(96);
  DeviceBuffer pc(std::vector<float>(c + 1, 1.f)), pd(std::vector<double>(c, 1.0)), sm(c * 4), si(c * 4),
      rmb(std::vector<float>(c, 0.f)), rvb(std::vector<float>(c, 1.f)), gwb(c * 4);
  const TensorView xv = x_view(t.x.get(), f32, sizes, false), yv = x_view(t.y.get(), f32, sizes, false);
  const TensorView w = channel_view(pc, f32, c), w4 = channel_view(pc, f32, c + 1),
                   wd = channel_view(pd, DType::kFloat64, c);
  const TensorView smv = channel_view(sm, f32, c), siv = channel_view(si, f32, c), rm = channel_view(rmb, f32, c),
                   rv = channel_view(rvb, f32, c), gw = channel_view(gwb, f32, c);
  const Workspace ws = t.workspace();
  const auto train = [&](const TensorView& x, const TensorView& y, const TensorView* wt, const TensorView* b,
                         const TensorView* rmp, const TensorView* rvp, BatchNormOptions o, Workspace wsp) {
    return batch_norm_training_forward(x, wt, b, rmp, rvp, o, y, smv, siv, wsp, nullptr);
  };
  const auto backward = [&](const TensorView& dy, const TensorView* wt, const TensorView& si_, const TensorView* dx,
                            const TensorView* dw) {
    return batch_norm_backward(dy, xv, wt, smv, si_, true, dx, dw, nullptr, ws, nullptr);
  };
  ASSERT_TRUE(train(xv, yv, &w, &w, &rm, &rv, {}, ws).is_ok());
  ASSERT_TRUE(backward(yv, &w, siv, &yv, &gw).is_ok());
  ASSERT_TRUE(batch_norm_inference_forward(xv, &w, &w, rm, rv, kEps, yv, &smv, &siv, nullptr).is_ok());
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());

  TensorView y16 = yv;
  y16.dtype = DType::kFloat16;
  const StatusCode bad = StatusCode::kInvalidArgument;
  expect_error(train(xv, y16, &w, &w, nullptr, nullptr, {}, ws), bad, "y");
  expect_error(train(xv, x_view(t.y.get(), f32, {2, 3, 4, 3}, false), &w, &w, nullptr, nullptr, {}, ws), bad, "y");
  expect_error(train(xv, x_view(t.y.get(), f32, sizes, true), &w, &w, nullptr, nullptr, {}, ws), bad, "y");
  expect_error(train(xv, yv, &w4, &w, nullptr, nullptr, {}, ws), bad, "weight");
  expect_error(train(xv, yv, &w, &wd, nullptr, nullptr, {}, ws), bad, "bias");
  const Status pair = train(xv, yv, &w, &w, &rm, nullptr, {}, ws);  // running_mean without running_var
  EXPECT_EQ(pair.code(), bad) << pair.message();
  EXPECT_NE(pair.message().find("running_"), std::string::npos) << pair.message();
  expect_error(train(xv, yv, &w, &w, nullptr, nullptr, {std::nan(""), kEps}, ws), bad, "momentum");
  expect_error(train(xv, yv, &w, &w, nullptr, nullptr, {kMomentum, -1.0}, ws), bad, "eps");
  expect_error(train(xv, yv, &w, &w, nullptr, nullptr, {}, Workspace{}), bad, "workspace");
  BatchNormRequirements req;
  ASSERT_TRUE(batch_norm_requirements(xv, &req).is_ok());
  expect_error(train(xv, yv, &w, &w, nullptr, nullptr, {}, {t.ws.get(), req.workspace_bytes - 1}), bad, "workspace");
  // H and W transposed: neither layout.
  TensorView xt = xv, yt = yv;
  std::swap(xt.strides[2], xt.strides[3]);
  std::swap(yt.strides[2], yt.strides[3]);
  expect_error(batch_norm_requirements(xt, &req), StatusCode::kUnsupported, "x");
  expect_error(train(xt, yt, &w, &w, nullptr, nullptr, {}, ws), StatusCode::kUnsupported, "x");
  expect_error(batch_norm_requirements(x_view(t.x.get(), f32, {2, 3, 1, 1, 2, 2}, false), &req), bad, "x");
  // Backward and inference.
  expect_error(backward(y16, &w, siv, &yv, &gw), bad, "dy");
  expect_error(backward(yv, &w4, siv, &yv, &gw), bad, "weight");
  expect_error(backward(yv, &w, w4, &yv, &gw), bad, "save_invstd");
  expect_error(backward(yv, &w, siv, &y16, &gw), bad, "dx");
  expect_error(backward(yv, &w, siv, &yv, &wd), bad, "dweight");
  expect_error(batch_norm_inference_forward(xv, &w, &w, rm, w4, kEps, yv, &smv, &siv, nullptr), bad, "running_var");
  expect_error(batch_norm_inference_forward(xv, &w, &w, rm, rv, kEps, yv, &wd, &siv, nullptr), bad, "save_mean");
}

// float32 values 1e4 + randn, against the float64 oracle. The statistics are of x - K_c (K_c the
// channel's first element), so their merges see means near 0. Merged raw (before K_c), each merged
// mean near 1e4 was rounded by up to half an ulp (4.9e-4), which reaches the variance as about
// u |mean| / std = 6e-4 a merge and the mean as a drift of ulps: a float32 emulation of the old
// kernels on these shapes and seeds gives variances 5e-7 .. 1.2e-4 off and means up to 1.3 ulps
// off, and some channels of every case fail the bounds below; of the shifted kernels, variances
// at most 5e-7 off and means half an ulp plus 5e-6 std. The bounds: the unbiased variance
// (running_var at momentum 1) within 2e-6 relative, a few float32 roundings a merge level (u =
// 6e-8, about 20 levels); save_mean within half an ulp of the exact mean (its correct rounding)
// plus 2e-5 std; save_invstd within 1.25e-6 relative. Both layouts; channels-first in the
// single-read kernel (one-CTA and 4-CTA clusters), in three passes and as columns (each channel's
// 49 column partials merged); channels-last (always three passes) with small and large channels.
// Each case runs twice: the same bits.
TEST_F(BatchNormGpu, StatisticsOfValuesNear1e4) {
  struct Near1e4Case {
    std::vector<int64_t> sizes;
    bool channels_last, reads_once;
  };
  const std::vector<Near1e4Case> cases = {
      {{4, 16, 32, 32}, false, true},    // one CTA a channel
      {{16, 8, 64, 64}, false, true},    // 4-CTA clusters: the merge through distributed shared memory
      {{2, 64, 256, 256}, false, false},  // 512 KiB channels: three passes
      {{64, 16, 7, 7}, false, false},     // 196-byte planes: the columns of [N, C * S]
      {{16, 32, 8, 8}, true, false},
      {{2, 64, 256, 256}, true, false},
  };
  uint32_t seed = 1;
  for (const Near1e4Case& k : cases) {
    const int64_t n = k.sizes[0], c = k.sizes[1], hw = k.sizes[2] * k.sizes[3], numel = n * c * hw, count = n * hw;
    SCOPED_TRACE(testing::Message() << "[" << n << ", " << c << ", " << k.sizes[2] << ", " << k.sizes[3] << "] "
                                    << (k.channels_last ? "channels-last" : "channels-first"));
    std::mt19937 gen(seed++);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> x(numel), x_mem(numel);  // x as [n, c, hw], and in memory order
    for (int64_t i = 0; i < numel; ++i) x[i] = static_cast<float>(1e4 + normal(gen));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t j = 0; j < hw; ++j)
          x_mem[k.channels_last ? (i * hw + j) * c + ch : (i * c + ch) * hw + j] = x[(i * c + ch) * hw + j];
    // The float64 oracle, momentum 1: want_rv is the exact unbiased variance.
    std::vector<double> want_y(numel), want_mean(c), want_invstd(c), want_rm(c, 0.0), want_rv(c, 1.0);
    ASSERT_TRUE(reference::batch_norm_train_forward(x.data(), nullptr, nullptr, want_y.data(), want_mean.data(),
                                                    want_invstd.data(), want_rm.data(), want_rv.data(), n, c, hw, 1.0,
                                                    kEps));

    DeviceBuffer dx(numel * 4), dy(numel * 4), drm(c * 4), drv(c * 4), dsm(c * 4), dsi(c * 4);
    upload<float>(dx, x_mem);
    const TensorView xv = x_view(dx.get(), DType::kFloat32, k.sizes, k.channels_last);
    const TensorView yv = x_view(dy.get(), DType::kFloat32, k.sizes, k.channels_last);
    const TensorView rmv = channel_view(drm, DType::kFloat32, c), rvv = channel_view(drv, DType::kFloat32, c),
                     smv = channel_view(dsm, DType::kFloat32, c), siv = channel_view(dsi, DType::kFloat32, c);
    bool once = false;
    Status s = batch_norm_reads_once(xv, false, &once);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(once, k.reads_once) << "not the path this case is for";
    BatchNormRequirements req;
    s = batch_norm_requirements(xv, &req);
    ASSERT_TRUE(s.is_ok()) << s.message();
    DeviceBuffer ws(req.workspace_bytes);
    bool ran = true;
    const auto run = [&]() {
      upload<float>(drm, std::vector<double>(c, 0.0));
      upload<float>(drv, std::vector<double>(c, 1.0));
      poison(dsm), poison(dsi);
      const Status st = batch_norm_training_forward(xv, nullptr, nullptr, &rmv, &rvv, BatchNormOptions{1.0, kEps}, yv,
                                                    smv, siv, {ws.get(), req.workspace_bytes}, nullptr);
      EXPECT_TRUE(st.is_ok()) << st.message();
      const cudaError_t err = cudaDeviceSynchronize();
      EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
      ran = ran && st.is_ok() && err == cudaSuccess;
      return std::vector<std::vector<unsigned char>>{raw(dsm), raw(dsi), raw(drm), raw(drv)};
    };
    const auto first = run();
    ASSERT_TRUE(ran);
    EXPECT_TRUE(first == run()) << "the statistics differ between runs";

    int failures = 0;
    for (int64_t ch = 0; ch < c && failures < 8; ++ch) {
      const double mean = at<float>(first[0], ch), invstd = at<float>(first[1], ch);
      const double rm = at<float>(first[2], ch), rv = at<float>(first[3], ch);
      const double biased = want_rv[ch] * static_cast<double>(count - 1) / static_cast<double>(count);
      const double half_ulp = std::ldexp(1.0, std::ilogb(want_mean[ch]) - 24);  // float32 at the mean
      const double mean_err = std::fabs(mean - want_mean[ch]), var_err = std::fabs(rv - want_rv[ch]) / want_rv[ch];
      const double invstd_err = std::fabs(invstd - want_invstd[ch]) / want_invstd[ch];
      const bool ok = mean_err <= half_ulp + 2e-5 * std::sqrt(biased) && var_err <= 2e-6 && invstd_err <= 1.25e-6 &&
                      rm == mean;
      if (ok) continue;
      ++failures;
      ADD_FAILURE() << std::setprecision(10) << "channel " << ch << ": save_mean " << mean << " (off " << mean_err << ", half an ulp "
                    << half_ulp << "), unbiased variance " << rv << " want " << want_rv[ch] << " (relative "
                    << var_err << "), save_invstd relative error " << invstd_err << ", running_mean " << rm;
    }
  }
}

}  // namespace
}  // namespace reducekit
