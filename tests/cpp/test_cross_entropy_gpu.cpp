// SPDX-License-Identifier: Apache-2.0
// Cross-entropy on the GPU against the float64 oracle: every dtype, class counts of several
// residues mod 8 (odd vocabularies), sliced and offset rows, ignored and out-of-range targets,
// class weights, label smoothing, z-loss and soft-capping, forward and backward; bitwise
// determinism and batch invariance; the fused forward and backward (into its own dlogits and over
// the logits) against the two apart, bit for bit; one upstream gradient for every row;
// cross_entropy_reduce's sum and mean against the oracle; cross_entropy_step against its three
// calls apart; argument errors. Class-probability targets
// (cross_entropy_probs_*) against the oracle, forward and both gradients, rows at independent
// alignments; their determinism, batch invariance and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/loss.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

struct Case {
  int64_t rows, classes;
  int64_t stride_pad = 0, in_offset = 0, out_offset = 0;  // row stride classes + stride_pad
  double smoothing = 0, z_scale = 0, softcap = 0;
  bool weights = false;
};

template <typename A> TensorView vector_view(void* data, int64_t n) {
  TensorView v;
  v.data = data, v.dtype = dtype_of<A>(), v.rank = 1, v.sizes[0] = n, v.strides[0] = 1, v.device = 0;
  return v;
}

template <typename A> std::vector<A> copy_back(const DeviceBuffer& b, int64_t n) {
  std::vector<A> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), b.get(), n * sizeof(A), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

template <typename T> using AccOf = std::conditional_t<sizeof(T) == 8, double, float>;

// Whether a row of `bytes` is staged on one CTA by `bands`.
bool staged_on_one_cta(const std::array<StagedBand, kMaxStagedBands>& bands, std::size_t bytes) {
  for (const StagedBand& band : bands)
    if (band.threads != 0 && bytes > band.min_row_bytes && bytes <= band.max_row_bytes) return bytes <= band.share_bytes;
  return false;
}

// Whether cross_entropy_fused stages the case's rows where the forward alone does not (16-bit and
// float32 rows of cross_entropy_staged_bands by bytes, no label smoothing or soft-capping: those
// over a cluster, and 110-128 KiB rows on one CTA), with bits of its own.
template <typename T> bool fused_bits_of_its_own(const Case& c) {
  if ((sizeof(T) != 2 && sizeof(T) != 4) || c.smoothing > 0 || c.softcap > 0) return false;
  const std::size_t bytes = std::size_t(c.classes) * sizeof(T);
  const auto step = cross_entropy_staged_bands(true);
  for (const StagedBand& band : step)
    if (band.threads != 0 && bytes > band.min_row_bytes && bytes <= band.max_row_bytes)
      return !staged_on_one_cta(cross_entropy_staged_bands(false), bytes);
  return false;
}

// Target of row r: spread over the classes, row 1 ignored.
std::vector<int64_t> targets_for(int64_t rows, int64_t classes) {
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = r == 1 ? -100 : (r * 7919 + 3) % classes;
  return t;
}

std::vector<double> weights_for(int64_t classes) {
  std::vector<double> w(classes);
  for (int64_t j = 0; j < classes; ++j) w[j] = 0.5 + 0.25 * static_cast<double>(j % 7);
  return w;
}

template <typename T> void check_case(const Case& c) {
  using Acc = std::conditional_t<sizeof(T) == 8, double, float>;
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " rows " << c.rows << " classes " << c.classes
                                  << " stride +" << c.stride_pad << " offsets " << c.in_offset << "/"
                                  << c.out_offset << " ls " << c.smoothing << " z " << c.z_scale << " cap "
                                  << c.softcap << (c.weights ? " weighted" : ""));
  const RowLayout in{c.rows, c.classes, c.classes + c.stride_pad, c.in_offset};
  const RowLayout out{c.rows, c.classes, c.classes + c.stride_pad, c.out_offset};
  const std::vector<double> values = make_values(c.rows * c.classes, "randn", 91);
  std::vector<T> image(in.span());
  std::vector<double> logits(c.rows * c.classes);  // what the kernel sees, in float64
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.classes; ++j) {
      const T v = from_double<T>(3.0 * values[r * c.classes + j]);
      image[in.offset + r * in.stride + j] = v;
      logits[r * c.classes + j] = to_double(v);
    }
  const std::vector<int64_t> targets = targets_for(c.rows, c.classes);
  const std::vector<double> weight = weights_for(c.classes);
  std::vector<Acc> weight_acc(weight.begin(), weight.end()), grad_acc(c.rows);
  const std::vector<double> grad_values = make_values(c.rows, "randn", 92);
  std::vector<double> grad(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) grad[r] = to_double(grad_acc[r] = static_cast<Acc>(grad_values[r]));

  DeviceBuffer dx(image), dtarget(targets), dweight(weight_acc), dgrad(grad_acc);
  DeviceBuffer dloss(c.rows * sizeof(Acc)), dlse(c.rows * sizeof(Acc)), ddlogits(out.span() * sizeof(T));
  ASSERT_TRUE(dx.get() && dtarget.get() && dweight.get() && dgrad.get() && dloss.get() && dlse.get() && ddlogits.get());
  REDUCEKIT_CUDA_OK(cudaMemset(ddlogits.get(), 0xff, out.span() * sizeof(T)));  // NaN where unwritten

  CrossEntropyOptions o;
  o.label_smoothing = c.smoothing, o.lse_square_scale = c.z_scale, o.softcap = c.softcap;
  const TensorView xv = row_view(dx.get(), dtype_of<T>(), in), gv = row_view(ddlogits.get(), dtype_of<T>(), out);
  const TensorView tv = vector_view<int64_t>(dtarget.get(), c.rows), wv = vector_view<Acc>(dweight.get(), c.classes);
  const TensorView lossv = vector_view<Acc>(dloss.get(), c.rows), lsev = vector_view<Acc>(dlse.get(), c.rows);
  const TensorView* w = c.weights ? &wv : nullptr;
  Status s = cross_entropy_forward(xv, tv, w, o, lossv, lsev, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = cross_entropy_backward(xv, tv, w, lsev, vector_view<Acc>(dgrad.get(), c.rows), o, gv, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());

  std::vector<Acc> loss(c.rows), lse(c.rows);
  std::vector<T> dlogits(out.span());
  REDUCEKIT_CUDA_OK(cudaMemcpy(loss.data(), dloss.get(), c.rows * sizeof(Acc), cudaMemcpyDeviceToHost));
  REDUCEKIT_CUDA_OK(cudaMemcpy(lse.data(), dlse.get(), c.rows * sizeof(Acc), cudaMemcpyDeviceToHost));
  REDUCEKIT_CUDA_OK(cudaMemcpy(dlogits.data(), ddlogits.get(), out.span() * sizeof(T), cudaMemcpyDeviceToHost));

  reference::CrossEntropyOptions ro;
  ro.reduction = reference::LossReduction::kNone;
  ro.label_smoothing = c.smoothing, ro.lse_square_scale = c.z_scale, ro.softcap = c.softcap;
  ro.weight = c.weights ? weight.data() : nullptr;
  std::vector<double> want_loss(c.rows), want_grad(c.rows * c.classes);
  ASSERT_TRUE(reference::cross_entropy_forward(logits.data(), targets.data(), want_loss.data(), c.rows, c.classes, ro));
  ASSERT_TRUE(reference::cross_entropy_backward(logits.data(), targets.data(), grad.data(), want_grad.data(), c.rows,
                                                c.classes, ro));
  const double max_w = c.weights ? 2.0 : 1.0;
  std::vector<double> row_scale(c.rows), grad_scale(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) {
    // The loss is a difference of terms as large as the logsumexp and the logits.
    double zmax = 0;
    for (int64_t j = 0; j < c.classes; ++j) zmax = std::max(zmax, std::fabs(logits[r * c.classes + j]));
    const double lse_scale = zmax + std::log(static_cast<double>(c.classes)) + 1;
    const double scale = row_scale[r] = max_w * lse_scale * (1 + 2 * c.z_scale * lse_scale) * 4;
    EXPECT_TRUE(close_enough<Acc>(loss[r], want_loss[r], scale)) << "loss row " << r << ": " << loss[r] << " vs "
                                                                  << want_loss[r];
    const double gscale = grad_scale[r] = std::fabs(grad[r]) * max_w * (2 + 2 * c.z_scale * lse_scale) * 4;
    for (int64_t j = 0; j < c.classes; ++j) {
      const double got = to_double(dlogits[out.offset + r * out.stride + j]), want = want_grad[r * c.classes + j];
      if (!close_enough<T>(got, want, gscale)) {
        ADD_FAILURE() << "dlogits row " << r << " class " << j << ": " << got << " vs " << want;
        return;
      }
    }
  }
  // The fused op, into dlogits of its own and written over a copy of the logits: the bits of the
  // forward and the backward, but for rows it stages where the forward alone does not, whose
  // loss and gradient are checked against the oracle instead.
  const bool shared_bits = !fused_bits_of_its_own<T>(c);
  DeviceBuffer floss(c.rows * sizeof(Acc)), flse(c.rows * sizeof(Acc)), fdlogits(out.span() * sizeof(T)),
      over(image);
  ASSERT_TRUE(floss.get() && flse.get() && fdlogits.get() && over.get());
  REDUCEKIT_CUDA_OK(cudaMemset(fdlogits.get(), 0xff, out.span() * sizeof(T)));
  const TensorView floss_v = vector_view<Acc>(floss.get(), c.rows), flse_v = vector_view<Acc>(flse.get(), c.rows);
  const TensorView gradv = vector_view<Acc>(dgrad.get(), c.rows);
  s = cross_entropy_fused(xv, tv, w, gradv, o, floss_v, flse_v, row_view(fdlogits.get(), dtype_of<T>(), out), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<Acc> fused_loss = copy_back<Acc>(floss, c.rows);
  const std::vector<T> fused_dlogits = copy_back<T>(fdlogits, out.span());
  if (shared_bits) {
    EXPECT_TRUE(same_bits(fused_loss, loss)) << "fused loss bits";
    EXPECT_TRUE(same_bits(copy_back<Acc>(flse, c.rows), lse)) << "fused lse bits";
    EXPECT_TRUE(same_bits(fused_dlogits, dlogits)) << "fused dlogits bits";
  } else {
    for (int64_t r = 0; r < c.rows; ++r) {
      EXPECT_TRUE(close_enough<Acc>(fused_loss[r], want_loss[r], row_scale[r])) << "fused loss row " << r;
      for (int64_t j = 0; j < c.classes; ++j)
        if (!close_enough<T>(to_double(fused_dlogits[out.offset + r * out.stride + j]), want_grad[r * c.classes + j],
                             grad_scale[r])) {
          ADD_FAILURE() << "fused dlogits row " << r << " class " << j;
          return;
        }
    }
  }
  const TensorView over_v = row_view(over.get(), dtype_of<T>(), in);
  s = cross_entropy_fused(over_v, tv, w, gradv, o, floss_v, flse_v, over_v, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<T> written = copy_back<T>(over, in.span());
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.classes; ++j)
      if (!same_bits(std::vector<T>{written[in.offset + r * in.stride + j]},
                     std::vector<T>{fused_dlogits[out.offset + r * out.stride + j]})) {
        ADD_FAILURE() << "in-place dlogits row " << r << " class " << j;
        return;
      }
  EXPECT_TRUE(same_bits(copy_back<Acc>(floss, c.rows), fused_loss)) << "in-place loss bits";

  // The row's logsumexp, as the backward uses it (of the soft-capped logits).
  for (int64_t r = 0; r < c.rows; ++r) {
    std::vector<double> z(c.classes);
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < c.classes; ++j) {
      const double x = logits[r * c.classes + j];
      z[j] = c.softcap > 0 ? c.softcap * std::tanh(x / c.softcap) : x;
      m = std::max(m, z[j]);
    }
    double sum = 0;
    for (double v : z) sum += std::exp(v - m);
    EXPECT_TRUE(close_enough<Acc>(lse[r], m + std::log(sum), std::fabs(m) + 1)) << "lse row " << r;
  }
}

template <typename T> void check_every_case() {
  for (const Case& c : {Case{5, 1}, Case{37, 7}, Case{64, 1000, 3, 1, 2}, Case{9, 50257}, Case{9, 50257, 1, 3, 0},
                        Case{4, 131073, 0, 0, 5}, Case{40, 1000, 0, 0, 0, 0.1, 0, 0, true},
                        Case{12, 4099, 5, 2, 7, 0.2, 1e-3, 30.0, true}, Case{12, 4099, 0, 0, 0, 0, 1e-4, 0},
                        Case{12, 4099, 0, 0, 0, 0, 0, 15.0}, Case{8, 4096, 0, 0, 0, 1.0, 0, 0, true},
                        Case{6, 14001, 1, 3, 0, 0, 1e-4, 0, true}, Case{6, 20000, 3, 1, 0, 0, 1e-4, 0, true},
                        Case{6, 30001, 1, 3, 0, 0, 1e-4, 0, true},
                        Case{3, 32768}, Case{3, 61440, 1, 3, 0},
                        // the step's fourth band: float32 past 880 KiB, 16-bit past it at 450561
                        Case{2, 256001, 1, 3, 0}, Case{2, 450561}}) {
    check_case<T>(c);
    if (testing::Test::HasFailure()) return;
  }
}

TEST(CrossEntropyGpu, MatchesTheOracleInEveryDtype) {
  REDUCEKIT_REQUIRE_GPU();
  check_every_case<float>();
  check_every_case<__nv_bfloat16>();
  check_every_case<__half>();
  check_every_case<double>();
}

// Bits of the per-row losses of `rows` rows of `classes` from row `first` of x (float32, dense).
std::vector<float> loss_bits(const DeviceBuffer& x, const DeviceBuffer& target, int64_t first, int64_t rows,
                             int64_t classes) {
  DeviceBuffer loss(rows * sizeof(float)), lse(rows * sizeof(float));
  const TensorView xv = row_view(static_cast<float*>(x.get()) + first * classes, DType::kFloat32,
                                 {rows, classes, classes, 0});
  const Status s = cross_entropy_forward(xv, vector_view<int64_t>(static_cast<int64_t*>(target.get()) + first, rows),
                                         nullptr, {}, vector_view<float>(loss.get(), rows),
                                         vector_view<float>(lse.get(), rows), nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  std::vector<float> out(rows);
  EXPECT_EQ(cudaMemcpy(out.data(), loss.get(), rows * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

TEST(CrossEntropyGpu, DeterministicAndBatchInvariant) {
  REDUCEKIT_REQUIRE_GPU();
  const int64_t rows = 300, classes = 50257;
  std::vector<float> x(rows * classes);
  const std::vector<double> v = make_values(rows * classes, "randn", 93);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(4 * v[i]);
  DeviceBuffer dx(x), dt(targets_for(rows, classes));
  const std::vector<float> all = loss_bits(dx, dt, 0, rows, classes);
  EXPECT_EQ(std::memcmp(all.data(), loss_bits(dx, dt, 0, rows, classes).data(), rows * sizeof(float)), 0)
      << "two calls differ";
  for (int64_t first : {0, 7, 299}) {
    const std::vector<float> one = loss_bits(dx, dt, first, 1, classes);
    EXPECT_EQ(std::memcmp(one.data(), &all[first], sizeof(float)), 0) << "row " << first << " alone";
  }
}

// Float32 rows on the row kernels: from cross_entropy_classes_from_bytes (32 MiB; 0 here) a launch
// per shift class (rows that start at the same offset in a 16-byte granule), each class on a loop
// for its shift; below, one launch reading each row's shift. The same rows at each of the four
// offsets, both ways, and fewer rows than classes, give the same loss, lse and dlogits bits, lean
// and with label smoothing (the kernels with extras).
TEST(CrossEntropyGpu, Float32RowsKeepTheirBitsInEveryShiftClass) {
  REDUCEKIT_REQUIRE_GPU();
  for (const int64_t classes : {int64_t(50257), int64_t(4099), int64_t(4001)}) {
    for (const double smoothing : {0.0, 0.1}) {
      SCOPED_TRACE(testing::Message() << "classes " << classes << " smoothing " << smoothing);
      // cross_entropy_fused (the one op that writes over the logits) runs these rows on the row
      // kernels, as forward and backward apart, unless it stages them (no smoothing, rows of the
      // step's bands from 16 KiB).
      const bool fused_on_row_kernels = smoothing > 0 || classes * 4 <= 16384;
      const int64_t rows = 7;
      const ScopedTuning row_loop("cross_entropy_split_below_rows", 0);  // the shift classes' kernels
      const std::vector<double> v = make_values(rows * classes, "randn", 97);
      std::vector<float> x(rows * classes + 3);
      for (int64_t i = 0; i < rows * classes; ++i) x[i] = static_cast<float>(3 * v[i]);
      CrossEntropyOptions o;
      o.label_smoothing = smoothing;
      DeviceBuffer dt(targets_for(rows, classes)), grad(std::vector<float>(rows, 0.5f));
      // Forward and backward over rows [first, first + n) placed `offset` elements on. dlogits:
      // at its own buffer's start (kOwn), `offset` elements on too (kShared: its rows at the
      // logits' offsets in their granules, so the backward's stores take the class's shift), or
      // over the logits themselves (kInPlace: cross_entropy_fused). Every element around the rows
      // must stay as it was.
      enum Gradient { kOwn, kShared, kInPlace };
      const auto run = [&](int64_t offset, int64_t first, int64_t n, Gradient where = kOwn) {
        std::vector<float> placed(x.size(), 0.0f);
        std::copy(x.begin(), x.begin() + rows * classes, placed.begin() + offset);
        const int64_t start = offset + first * classes, count = n * classes;
        const int64_t dl_offset = where == kShared ? start % 4 : 0;
        DeviceBuffer dx(placed), loss(n * 4), lse(n * 4), dl(std::vector<float>(count + 3, NAN));
        const RowLayout at{n, classes, classes, 0};
        const TensorView xv = row_view(static_cast<float*>(dx.get()) + start, DType::kFloat32, at);
        const TensorView tv = vector_view<int64_t>(static_cast<int64_t*>(dt.get()) + first, n);
        const TensorView lv = vector_view<float>(loss.get(), n), sv = vector_view<float>(lse.get(), n);
        const TensorView gv = vector_view<float>(static_cast<float*>(grad.get()) + first, n);
        if (where == kInPlace) {
          const Status st = cross_entropy_fused(xv, tv, nullptr, gv, o, lv, sv, xv, nullptr);
          EXPECT_TRUE(st.is_ok()) << st.message();
        } else {
          Status st = cross_entropy_forward(xv, tv, nullptr, o, lv, sv, nullptr);
          EXPECT_TRUE(st.is_ok()) << st.message();
          st = cross_entropy_backward(xv, tv, nullptr, sv, gv, o,
                                      row_view(static_cast<float*>(dl.get()) + dl_offset, DType::kFloat32, at), nullptr);
          EXPECT_TRUE(st.is_ok()) << st.message();
        }
        std::vector<float> bits = copy_back<float>(loss, n), l = copy_back<float>(lse, n);
        const std::vector<float> image =
            where == kInPlace ? copy_back<float>(dx, int64_t(x.size())) : copy_back<float>(dl, count + 3);
        const int64_t from = where == kInPlace ? start : dl_offset;
        for (int64_t i = 0; i < int64_t(image.size()); ++i) {
          if (i >= from && i < from + count) continue;
          const bool kept = where == kInPlace ? image[i] == placed[i] : std::isnan(image[i]);
          if (!kept) {
            ADD_FAILURE() << "element " << i << " around the rows was written";
            break;
          }
        }
        bits.insert(bits.end(), l.begin(), l.end());
        bits.insert(bits.end(), image.begin() + from, image.begin() + from + count);
        return bits;
      };
      const std::vector<float> want = run(0, 0, rows);  // one launch: these bytes are under 32 MiB
      for (const float b : std::vector<float>(want.begin(), want.begin() + rows)) EXPECT_TRUE(std::isfinite(b));
      for (const int64_t offset : {1, 2, 3}) EXPECT_TRUE(same_bits(run(offset, 0, rows), want)) << "offset " << offset;
      const ScopedTuning by_class("cross_entropy_classes_from_bytes", 0);
      for (const int64_t offset : {0, 1, 2, 3}) {
        EXPECT_TRUE(same_bits(run(offset, 0, rows), want)) << "by shift class, offset " << offset;
        if (offset > 0) {
          EXPECT_TRUE(same_bits(run(offset, 0, rows, kShared), want)) << "stores by shift class, offset " << offset;
        }
        if (fused_on_row_kernels) {
          EXPECT_TRUE(same_bits(run(offset, 0, rows, kInPlace), want)) << "in place by shift class, offset " << offset;
        }
      }
      // Rows 2-4 alone (three rows: three of the four classes) against the same rows of the batch.
      const std::vector<float> part = run(1, 2, 3);
      EXPECT_TRUE(same_bits(run(1, 2, 3, kShared), part)) << "rows 2-4 alone, stores by shift class";
      std::vector<float> want_part(want.begin() + 2, want.begin() + 5);
      want_part.insert(want_part.end(), want.begin() + rows + 2, want.begin() + rows + 5);
      want_part.insert(want_part.end(), want.begin() + 2 * rows + 2 * classes, want.begin() + 2 * rows + 5 * classes);
      EXPECT_TRUE(same_bits(part, want_part)) << "rows 2-4 alone, by shift class";
    }
  }
}

// Split rows (a batch of fewer rows than fill the device: each row's chunks on a cluster) give
// the row loop's bits: loss, lse and dlogits, lean and with the extras, targets ignored and out of
// range, rows at an odd offset; and cross_entropy_fused where it runs the row kernels.
template <typename T> void check_split_rows() {
  for (const int64_t classes : {int64_t(50257), int64_t(128256), int64_t(8193), int64_t(2049)}) {
    for (const bool extras : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " classes " << classes
                                      << (extras ? " smoothing, softcap, z-loss" : ""));
      const int64_t rows = 9;
      const std::vector<double> v = make_values(rows * classes, "randn", 99);
      std::vector<T> x(rows * classes + 1);
      for (int64_t i = 0; i < rows * classes; ++i) x[i + 1] = from_double<T>(3 * v[i]);
      std::vector<int64_t> targets = targets_for(rows, classes);
      targets[4] = classes;
      CrossEntropyOptions o;
      if (extras) o.label_smoothing = 0.1, o.softcap = 20, o.lse_square_scale = 1e-3;
      DeviceBuffer dt(targets), grad(std::vector<AccOf<T>>(rows, AccOf<T>(0.5)));
      const RowLayout at{rows, classes, classes, 0};
      // loss, lse and dlogits bits of the forward and backward, or of cross_entropy_fused over the logits
      const auto run = [&](bool fused) {
        DeviceBuffer dx(x), loss(rows * sizeof(AccOf<T>)), lse(rows * sizeof(AccOf<T>)), dl(rows * classes * sizeof(T));
        const TensorView xv = row_view(static_cast<T*>(dx.get()) + 1, dtype_of<T>(), at);
        const TensorView tv = vector_view<int64_t>(dt.get(), rows), gv = vector_view<AccOf<T>>(grad.get(), rows);
        const TensorView lv = vector_view<AccOf<T>>(loss.get(), rows), sv = vector_view<AccOf<T>>(lse.get(), rows);
        Status st = fused ? cross_entropy_fused(xv, tv, nullptr, gv, o, lv, sv, xv, nullptr)
                          : cross_entropy_forward(xv, tv, nullptr, o, lv, sv, nullptr);
        EXPECT_TRUE(st.is_ok()) << st.message();
        if (!fused) {
          st = cross_entropy_backward(xv, tv, nullptr, sv, gv, o, row_view(dl.get(), dtype_of<T>(), at), nullptr);
          EXPECT_TRUE(st.is_ok()) << st.message();
        }
        std::vector<double> bits;
        for (const AccOf<T> b : copy_back<AccOf<T>>(loss, rows)) bits.push_back(b);
        for (const AccOf<T> b : copy_back<AccOf<T>>(lse, rows)) bits.push_back(b);
        const std::vector<T> d = fused ? copy_back<T>(dx, rows * classes + 1) : copy_back<T>(dl, rows * classes);
        for (std::size_t i = fused ? 1 : 0; i < d.size(); ++i) bits.push_back(to_double(d[i]));
        return bits;
      };
      // NaN compares unequal: compare the doubles' bytes (each widened exactly from its source)
      std::vector<double> loop, loop_fused;
      {
        const ScopedTuning row_loop("cross_entropy_split_below_rows", 0);
        loop = run(false), loop_fused = run(true);
      }
      EXPECT_TRUE(std::isnan(loop[4])) << "row 4's target is out of range";
      EXPECT_EQ(loop[1], 0.0) << "row 1 is ignored";
      const ScopedTuning split("cross_entropy_split_below_rows", int64_t(1) << 30);
      EXPECT_TRUE(same_bits(run(false), loop)) << "forward and backward";
      // the fused op stages rows of its bands without the extras; elsewhere it runs the row kernels
      if (extras || !fused_bits_of_its_own<T>({rows, classes})) EXPECT_TRUE(same_bits(run(true), loop_fused)) << "fused";
    }
  }
}

TEST(CrossEntropyGpu, SplitRowsKeepTheRowKernelsBits) {
  REDUCEKIT_REQUIRE_GPU();
  check_split_rows<__nv_bfloat16>();
  check_split_rows<float>();
  check_split_rows<__half>();
  check_split_rows<double>();
}

// The backward's two layouts give the same bits: dlogits rows at the logits rows' offsets in their
// granules (whole aligned granules at any row length) and at other offsets (the forward's vector
// layout); rows of a few elements to a vocabulary, lean and with the extras, ignored and
// out-of-range targets; the elements around the rows stay as they were. (Split rows take the
// forward's layout: SplitRowsKeepTheRowKernelsBits.) The same for class-probability targets, whose
// rows share the logits' offsets.
template <typename T> void check_gradient_layouts() {
  constexpr int64_t kVec = 16 / sizeof(T), kIn = 1;  // the logits rows start an element into a granule
  const ScopedTuning row_loop("cross_entropy_split_below_rows", 0);  // a few rows, not split
  for (const int64_t classes : {int64_t(3), int64_t(kVec + 1), int64_t(4099), int64_t(50257)}) {
    for (const bool extras : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " classes " << classes
                                      << (extras ? " smoothing, softcap, z-loss" : ""));
      const int64_t rows = 5, count = rows * classes;
      const std::vector<double> v = make_values(count, "randn", 101);
      std::vector<T> x(count + kIn);
      for (int64_t i = 0; i < count; ++i) x[i + kIn] = from_double<T>(3 * v[i]);
      std::vector<int64_t> targets = targets_for(rows, classes);
      targets[3] = -1;  // out of range: a NaN row
      CrossEntropyOptions o;
      if (extras) o.label_smoothing = 0.1, o.softcap = 20, o.lse_square_scale = 1e-3;
      const RowLayout at{rows, classes, classes, 0};
      DeviceBuffer dx(x), dt(targets), grad(std::vector<AccOf<T>>(rows, AccOf<T>(0.5)));
      DeviceBuffer loss(rows * sizeof(AccOf<T>)), lse(rows * sizeof(AccOf<T>));
      const TensorView xv = row_view(static_cast<T*>(dx.get()) + kIn, dtype_of<T>(), at);
      const TensorView tv = vector_view<int64_t>(dt.get(), rows), sv = vector_view<AccOf<T>>(lse.get(), rows);
      const Status st =
          cross_entropy_forward(xv, tv, nullptr, o, vector_view<AccOf<T>>(loss.get(), rows), sv, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      // dlogits `offset` elements into a buffer of sentinels: the rows' gradient bits
      const auto gradient_at = [&](int64_t offset) {
        const T sentinel = from_double<T>(7.0);
        DeviceBuffer dl(std::vector<T>(count + 2 * kVec, sentinel));
        const Status s = cross_entropy_backward(xv, tv, nullptr, sv, vector_view<AccOf<T>>(grad.get(), rows), o,
                                                row_view(static_cast<T*>(dl.get()) + offset, dtype_of<T>(), at), nullptr);
        EXPECT_TRUE(s.is_ok()) << s.message();
        const std::vector<T> image = copy_back<T>(dl, count + 2 * kVec);
        for (int64_t i = 0; i < int64_t(image.size()); ++i)
          if ((i < offset || i >= offset + count) && to_double(image[i]) != 7.0) {
            ADD_FAILURE() << "dlogits at offset " << offset << ": element " << i << " around the rows was written";
            break;
          }
        return std::vector<T>(image.begin() + offset, image.begin() + offset + count);
      };
      const std::vector<T> granules = gradient_at(kIn), shifted = gradient_at(kIn + 1);
      EXPECT_TRUE(same_bits(granules, shifted)) << "dlogits at the logits' offsets against one element on";
      EXPECT_TRUE(same_bits(granules, gradient_at(kIn + kVec))) << "a granule on";
      EXPECT_TRUE(std::isnan(to_double(granules[3 * classes]))) << "row 3's target is out of range";
      EXPECT_EQ(to_double(granules[1 * classes]), 0.0) << "row 1 is ignored";

      // Class-probability targets at the logits' offsets: dlogits and dtarget both ways.
      std::vector<T> q(count + kIn);
      for (int64_t i = 0; i < count; ++i)
        q[i + kIn] = from_double<T>(1.0 / double(classes) * (1 + 0.5 * v[count - 1 - i]));
      DeviceBuffer dq(q), mass(rows * sizeof(AccOf<T>));
      const TensorView qv = row_view(static_cast<T*>(dq.get()) + kIn, dtype_of<T>(), at);
      const TensorView mv = vector_view<AccOf<T>>(mass.get(), rows);
      ASSERT_TRUE(
          cross_entropy_probs_forward(xv, qv, nullptr, o, vector_view<AccOf<T>>(loss.get(), rows), sv, mv, nullptr)
              .is_ok());
      const auto probs_gradients_at = [&](int64_t offset) {
        const T sentinel = from_double<T>(7.0);
        DeviceBuffer dl(std::vector<T>(count + 2 * kVec, sentinel)), dt_out(std::vector<T>(count + 2 * kVec, sentinel));
        const TensorView dtv = row_view(static_cast<T*>(dt_out.get()) + offset, dtype_of<T>(), at);
        const Status s = cross_entropy_probs_backward(xv, qv, nullptr, sv, mv, vector_view<AccOf<T>>(grad.get(), rows),
                                                      o, row_view(static_cast<T*>(dl.get()) + offset, dtype_of<T>(), at),
                                                      &dtv, nullptr);
        EXPECT_TRUE(s.is_ok()) << s.message();
        std::vector<T> both;
        for (const DeviceBuffer* b : {&dl, &dt_out}) {
          const std::vector<T> image = copy_back<T>(*b, count + 2 * kVec);
          for (int64_t i = 0; i < int64_t(image.size()); ++i)
            if ((i < offset || i >= offset + count) && to_double(image[i]) != 7.0) {
              ADD_FAILURE() << "probability gradients at offset " << offset << ": element " << i << " was written";
              break;
            }
          both.insert(both.end(), image.begin() + offset, image.begin() + offset + count);
        }
        return both;
      };
      EXPECT_TRUE(same_bits(probs_gradients_at(kIn), probs_gradients_at(kIn + 1)))
          << "probability gradients at the logits' offsets against one element on";
    }
  }
}

TEST(CrossEntropyGpu, GradientBitsAtAnyDlogitsOffset) {
  REDUCEKIT_REQUIRE_GPU();
  check_gradient_layouts<__nv_bfloat16>();
  check_gradient_layouts<float>();
  check_gradient_layouts<__half>();
  check_gradient_layouts<double>();
}

// Rows of the staged bands (one 256-thread CTA up to 72 KiB, one 512-thread CTA, a cluster), more
// of them than the device holds at once: the fused op's bits are the same in two calls, for a row
// alone as in the batch, and at another alignment;
// out-of-range targets give NaN rows, ignored ones zero, and the other rows are untouched.
template <typename T> void check_staged_rows() {
  for (const int64_t classes : {12001, 20000, 28001, 50257, 131073}) {
    SCOPED_TRACE(testing::Message() << "classes " << classes);
    const int64_t rows = classes > 100000 ? 120 : 300;  // more rows than CTAs (clusters) resident at once
    const std::vector<double> v = make_values(rows * classes, "randn", 95);
    std::vector<T> x(rows * classes + 1);  // one element more: the rows again one element on
    for (int64_t i = 0; i < rows * classes; ++i) x[i] = from_double<T>(3 * v[i]);
    std::vector<int64_t> targets = targets_for(rows, classes);
    targets[5] = classes + 3, targets[6] = -7;
    std::vector<T> shifted(rows * classes + 1);
    std::copy(x.begin(), x.begin() + rows * classes, shifted.begin() + 1);
    DeviceBuffer dx(x), dshift(shifted), dt(targets), grad(std::vector<float>(rows, 0.5f));
    // The fused op over rows [first, first + n) of `base` (+ `offset` elements): loss and dlogits bits.
    const auto run = [&](const DeviceBuffer& base, int64_t offset, int64_t first, int64_t n) {
      DeviceBuffer loss(n * 4), lse(n * 4), dl(n * classes * sizeof(T));
      const RowLayout rows_at{n, classes, classes, 0};
      const TensorView xv = row_view(static_cast<T*>(base.get()) + offset + first * classes, dtype_of<T>(), rows_at);
      const Status st = cross_entropy_fused(xv, vector_view<int64_t>(static_cast<int64_t*>(dt.get()) + first, n), nullptr,
                                            vector_view<float>(static_cast<float*>(grad.get()) + first, n), {},
                                            vector_view<float>(loss.get(), n), vector_view<float>(lse.get(), n),
                                            row_view(dl.get(), dtype_of<T>(), rows_at), nullptr);
      EXPECT_TRUE(st.is_ok()) << st.message();
      return std::make_pair(copy_back<float>(loss, n), copy_back<T>(dl, n * classes));
    };
    const auto all = run(dx, 0, 0, rows);
    EXPECT_TRUE(same_bits(run(dx, 0, 0, rows).first, all.first)) << "two calls differ";
    for (const int64_t r : {int64_t(0), int64_t(5), int64_t(17), rows - 1}) {
      const auto one = run(dx, 0, r, 1), moved = run(dshift, 1, r, 1);
      const std::vector<float> want(all.first.begin() + r, all.first.begin() + r + 1);
      const std::vector<T> want_dl(all.second.begin() + r * classes, all.second.begin() + (r + 1) * classes);
      EXPECT_TRUE(same_bits(one.first, want) && same_bits(one.second, want_dl)) << "row " << r << " alone";
      EXPECT_TRUE(same_bits(moved.first, want) && same_bits(moved.second, want_dl)) << "row " << r << " moved";
    }
    for (const int64_t r : {5, 6}) {
      EXPECT_TRUE(std::isnan(all.first[r])) << "row " << r;
      for (int64_t j = 0; j < classes; j += 997) EXPECT_TRUE(std::isnan(to_double(all.second[r * classes + j])));
    }
    EXPECT_EQ(all.first[1], 0.0f) << "ignored";
    for (int64_t j = 0; j < classes; j += 997) EXPECT_EQ(to_double(all.second[classes + j]), 0.0);
    for (const int64_t r : {0, 4, 7}) EXPECT_TRUE(std::isfinite(all.first[r])) << "row " << r;
  }
}

TEST(CrossEntropyGpu, StagedRowsDeterministicBatchInvariantAndSafe) {
  REDUCEKIT_REQUIRE_GPU();
  check_staged_rows<__nv_bfloat16>();
  check_staged_rows<float>();
}

// A target outside [0, classes) that is not ignore_index gives its row a NaN loss and NaN
// gradients, reads and writes nothing out of bounds, and leaves the other rows as they are.
TEST(CrossEntropyGpu, OutOfRangeTargetsGiveNaNRows) {
  REDUCEKIT_REQUIRE_GPU();
  const int64_t rows = 4, classes = 1000;
  std::vector<float> x(rows * classes);
  const std::vector<double> v = make_values(rows * classes, "randn", 94);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(v[i]);
  const std::vector<int64_t> targets = {3, classes, -5, -100};
  DeviceBuffer dx(x), dt(targets), loss(rows * 4), lse(rows * 4), grad(std::vector<float>(rows, 1.0f)),
      dl(rows * classes * 4);
  const TensorView xv = row_view(dx.get(), DType::kFloat32, {rows, classes, classes, 0});
  const TensorView tv = vector_view<int64_t>(dt.get(), rows), lv = vector_view<float>(loss.get(), rows),
                   sv = vector_view<float>(lse.get(), rows);
  ASSERT_TRUE(cross_entropy_forward(xv, tv, nullptr, {}, lv, sv, nullptr).is_ok());
  ASSERT_TRUE(cross_entropy_backward(xv, tv, nullptr, sv, vector_view<float>(grad.get(), rows), {},
                                     row_view(dl.get(), DType::kFloat32, {rows, classes, classes, 0}), nullptr)
                  .is_ok());
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> l(rows), g(rows * classes);
  REDUCEKIT_CUDA_OK(cudaMemcpy(l.data(), loss.get(), rows * 4, cudaMemcpyDeviceToHost));
  REDUCEKIT_CUDA_OK(cudaMemcpy(g.data(), dl.get(), g.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(std::isfinite(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_EQ(l[3], 0.0f) << "ignored";
  for (int64_t j = 0; j < classes; ++j) {
    EXPECT_TRUE(std::isfinite(g[j]));
    EXPECT_TRUE(std::isnan(g[classes + j]));
    EXPECT_TRUE(std::isnan(g[2 * classes + j]));
    EXPECT_EQ(g[3 * classes + j], 0.0f);
  }
}

// cross_entropy_reduce over the forward's losses against the oracle's kSum / kMean (row 1
// ignored, with and without class weights), in out's dtype; the same bits twice; the denominator
// alone (no losses) the same bits as beside them and out then the numerator over it, divided.
template <typename T> void check_reduce(int64_t rows, bool weighted, LossReduction how) {
  using Acc = AccOf<T>;
  const int64_t classes = 37;
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " rows " << rows << (weighted ? " weighted" : "")
                                  << (how == LossReduction::kMean ? " mean" : " sum"));
  const std::vector<double> values = make_values(rows * classes, "randn", 95);
  std::vector<T> x(rows * classes);
  std::vector<double> logits(rows * classes);
  for (int64_t i = 0; i < rows * classes; ++i) logits[i] = to_double(x[i] = from_double<T>(3.0 * values[i]));
  const std::vector<int64_t> targets = targets_for(rows, classes);
  const std::vector<double> weight = weights_for(classes);
  DeviceBuffer dx(x), dt(targets), dw(std::vector<Acc>(weight.begin(), weight.end()));
  DeviceBuffer loss(rows * sizeof(Acc) + 1), lse(rows * sizeof(Acc) + 1), out(4 * sizeof(T)), den(4 * sizeof(Acc));
  const TensorView xv = row_view(dx.get(), dtype_of<T>(), {rows, classes, classes, 0});
  const TensorView tv = vector_view<int64_t>(dt.get(), rows), wv = vector_view<Acc>(dw.get(), classes);
  const TensorView lossv = vector_view<Acc>(loss.get(), rows), lsev = vector_view<Acc>(lse.get(), rows);
  const TensorView* w = weighted ? &wv : nullptr;
  ASSERT_TRUE(cross_entropy_forward(xv, tv, w, {}, lossv, lsev, nullptr).is_ok());
  for (int k = 0; k < 4; ++k) {  // out and denominator k; k = 2: the denominator alone; 3: no targets
    const TensorView denv = vector_view<Acc>(static_cast<Acc*>(den.get()) + k, 1);
    const Status s = cross_entropy_reduce(k == 2 ? nullptr : &lossv, k == 3 ? nullptr : &tv, k == 3 ? nullptr : w,
                                          -100, how, vector_view<T>(static_cast<T*>(out.get()) + k, 1), &denv, nullptr,
                                          /*numerator=*/0.75);  // ignored beside losses
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
  const std::vector<T> got = copy_back<T>(out, 4);
  const std::vector<Acc> denominators = copy_back<Acc>(den, 4);
  reference::CrossEntropyOptions ro;
  ro.reduction = how == LossReduction::kMean ? reference::LossReduction::kMean : reference::LossReduction::kSum;
  ro.weight = weighted ? weight.data() : nullptr;
  double want = 0;
  ASSERT_TRUE(reference::cross_entropy_forward(logits.data(), targets.data(), &want, rows, classes, ro));
  double kept = 0;
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] != -100) kept += weighted ? weight[targets[r]] : 1.0;
  const double rel = sizeof(T) == 2 ? 8e-3 : sizeof(T) == 4 ? 1e-5 : 1e-12;
  const auto tol = [rel](double v) { return rel * (std::abs(v) + 1e-3); };
  if (kept > 0 || how == LossReduction::kSum) EXPECT_NEAR(to_double(got[0]), want, tol(want));
  else EXPECT_TRUE(std::isnan(to_double(got[0]))) << "a mean over no kept row";
  EXPECT_EQ(std::memcmp(&got[0], &got[1], sizeof(T)), 0) << "two calls differ";
  EXPECT_EQ(std::memcmp(&denominators[0], &denominators[1], sizeof(Acc)), 0) << "two calls differ";
  EXPECT_EQ(std::memcmp(&denominators[0], &denominators[2], sizeof(Acc)), 0) << "the denominator alone differs";
  EXPECT_NEAR(static_cast<double>(denominators[0]), how == LossReduction::kMean ? kept : 1.0, 1e-6 * (kept + 1));
  const T scale = from_double<T>(static_cast<double>(Acc(0.75) / denominators[2]));  // the step's grad_loss
  EXPECT_EQ(std::memcmp(&got[2], &scale, sizeof(T)), 0) << "out of the denominator alone: 0.75 / it";
  // Without targets (class-probability losses) the mean divides by the rows.
  EXPECT_EQ(static_cast<double>(denominators[3]), how == LossReduction::kMean ? static_cast<double>(rows) : 1.0);
  double total = 0;
  ro.reduction = reference::LossReduction::kSum;
  ASSERT_TRUE(reference::cross_entropy_forward(logits.data(), targets.data(), &total, rows, classes, ro));
  const double want_rows = how == LossReduction::kMean ? total / static_cast<double>(rows) : total;
  if (rows > 0) EXPECT_NEAR(to_double(got[3]), want_rows, tol(want_rows)) << "without targets";
  else if (how == LossReduction::kMean) EXPECT_TRUE(std::isnan(to_double(got[3]))) << "a mean over no row";
}

TEST(CrossEntropyGpu, ReduceMatchesTheOracle) {
  REDUCEKIT_REQUIRE_GPU();
  for (int64_t rows : {0, 1, 2, 3, 515, 5000})
    for (bool weighted : {false, true})
      for (LossReduction how : {LossReduction::kSum, LossReduction::kMean}) {
        check_reduce<float>(rows, weighted, how);
        check_reduce<__nv_bfloat16>(rows, weighted, how);
        check_reduce<__half>(rows, weighted, how);
        check_reduce<double>(rows, weighted, how);
        if (testing::Test::HasFailure()) return;
      }
}

// grad_loss of one value serves every row: the backward's and the fused op's bits those of the
// same value repeated a row, on the row kernels (4099 classes), the staged rows (16-bit 32000)
// and the split rows (2 rows of 50257).
template <typename T> void check_one_upstream_gradient(int64_t rows, int64_t classes) {
  using Acc = AccOf<T>;
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " rows " << rows << " classes " << classes);
  const std::vector<double> values = make_values(rows * classes, "randn", 96);
  std::vector<T> x(rows * classes);
  for (int64_t i = 0; i < rows * classes; ++i) x[i] = from_double<T>(3.0 * values[i]);
  const Acc g = static_cast<Acc>(0.375);
  DeviceBuffer dx(x), dt(targets_for(rows, classes)), one(std::vector<Acc>{g}), each(std::vector<Acc>(rows, g));
  DeviceBuffer loss(rows * sizeof(Acc)), lse(rows * sizeof(Acc)), loss2(rows * sizeof(Acc)), lse2(rows * sizeof(Acc));
  const std::size_t bytes = rows * classes * sizeof(T);
  DeviceBuffer d_one(bytes), d_each(bytes), f_one(bytes), f_each(bytes);
  const RowLayout layout{rows, classes, classes, 0};
  const TensorView xv = row_view(dx.get(), dtype_of<T>(), layout), tv = vector_view<int64_t>(dt.get(), rows);
  const TensorView lv = vector_view<Acc>(loss.get(), rows), sv = vector_view<Acc>(lse.get(), rows);
  const TensorView lv2 = vector_view<Acc>(loss2.get(), rows), sv2 = vector_view<Acc>(lse2.get(), rows);
  const TensorView onev = vector_view<Acc>(one.get(), 1), eachv = vector_view<Acc>(each.get(), rows);
  ASSERT_TRUE(cross_entropy_forward(xv, tv, nullptr, {}, lv, sv, nullptr).is_ok());
  ASSERT_TRUE(cross_entropy_backward(xv, tv, nullptr, sv, onev, {}, row_view(d_one.get(), dtype_of<T>(), layout),
                                     nullptr).is_ok());
  ASSERT_TRUE(cross_entropy_backward(xv, tv, nullptr, sv, eachv, {}, row_view(d_each.get(), dtype_of<T>(), layout),
                                     nullptr).is_ok());
  ASSERT_TRUE(cross_entropy_fused(xv, tv, nullptr, onev, {}, lv2, sv2, row_view(f_one.get(), dtype_of<T>(), layout),
                                  nullptr).is_ok());
  ASSERT_TRUE(cross_entropy_fused(xv, tv, nullptr, eachv, {}, lv2, sv2, row_view(f_each.get(), dtype_of<T>(), layout),
                                  nullptr).is_ok());
  const int64_t n = rows * classes;
  const std::vector<T> a = copy_back<T>(d_one, n), b = copy_back<T>(d_each, n);
  const std::vector<T> c = copy_back<T>(f_one, n), d = copy_back<T>(f_each, n);
  EXPECT_TRUE(same_bits(a, b)) << "cross_entropy_backward";
  EXPECT_TRUE(same_bits(c, d)) << "cross_entropy_fused";
  int64_t nonzero = 0;
  for (const T& v : a) nonzero += to_double(v) != 0.0;
  EXPECT_EQ(nonzero, (rows - 1) * classes) << "a gradient on every class of the kept rows (row 1 is ignored)";
}

TEST(CrossEntropyGpu, OneUpstreamGradientServesEveryRow) {
  REDUCEKIT_REQUIRE_GPU();
  check_one_upstream_gradient<float>(9, 4099);
  check_one_upstream_gradient<__nv_bfloat16>(9, 4099);
  check_one_upstream_gradient<__nv_bfloat16>(5, 32000);
  check_one_upstream_gradient<float>(2, 50257);
  check_one_upstream_gradient<double>(7, 1001);
}

// cross_entropy_step (its fused kernel started behind the denominator's, the loss reduce behind
// it) against the same three calls made one after another: the same bits for out, the per-row
// values and dlogits, into a buffer of its own and over the logits.
template <typename T>
void check_step(int64_t rows, int64_t classes, bool weighted, LossReduction how, double smoothing,
                int64_t ignore_index = -100) {
  using Acc = AccOf<T>;
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " rows " << rows << " classes " << classes
                                  << (weighted ? " weighted" : "") << (how == LossReduction::kMean ? " mean" : " sum")
                                  << " smoothing " << smoothing);
  const std::vector<double> values = make_values(rows * classes, "randn", 97);
  // float16's 5-bit exponent flushes a third of the gradients of a 3-sigma spread to zero.
  const double spread = std::is_same_v<T, __half> ? 1.5 : 3.0;
  std::vector<T> x(rows * classes);
  for (int64_t i = 0; i < rows * classes; ++i) x[i] = from_double<T>(spread * values[i]);
  const std::vector<double> weight = weights_for(classes);
  DeviceBuffer dx(x), over(x), dt(targets_for(rows, classes)), dw(std::vector<Acc>(weight.begin(), weight.end()));
  const std::size_t bytes = rows * classes * sizeof(T);
  DeviceBuffer grad(bytes), grad_ref(bytes), out(2 * sizeof(T)), out_ref(sizeof(T)), scale(2 * sizeof(Acc));
  DeviceBuffer loss(3 * rows * sizeof(Acc) + 1), lse(3 * rows * sizeof(Acc) + 1);
  const RowLayout layout{rows, classes, classes, 0};
  const TensorView xv = row_view(dx.get(), dtype_of<T>(), layout), overv = row_view(over.get(), dtype_of<T>(), layout);
  const TensorView tv = vector_view<int64_t>(dt.get(), rows), wv = vector_view<Acc>(dw.get(), classes);
  const TensorView* w = weighted ? &wv : nullptr;
  const auto at = [rows](const DeviceBuffer& b, int k) { return vector_view<Acc>(static_cast<Acc*>(b.get()) + k * rows, rows); };
  const auto one = [](const DeviceBuffer& b, int k) { return vector_view<Acc>(static_cast<Acc*>(b.get()) + k, 1); };
  const auto out_at = [](const DeviceBuffer& b, int k) { return vector_view<T>(static_cast<T*>(b.get()) + k, 1); };
  CrossEntropyOptions o;
  o.label_smoothing = smoothing;
  o.ignore_index = ignore_index;
  const double grad_scale = 0.75;
  // The three calls apart.
  ASSERT_TRUE(cross_entropy_reduce(nullptr, &tv, w, o.ignore_index, how, one(scale, 0), nullptr, nullptr, grad_scale)
                  .is_ok());
  ASSERT_TRUE(cross_entropy_fused(xv, tv, w, one(scale, 0), o, at(loss, 0), at(lse, 0),
                                  row_view(grad_ref.get(), dtype_of<T>(), layout), nullptr).is_ok());
  const TensorView loss0 = at(loss, 0);
  ASSERT_TRUE(cross_entropy_reduce(&loss0, &tv, w, o.ignore_index, how, out_at(out_ref, 0), nullptr, nullptr).is_ok());
  // The step, into dlogits of its own and over the logits.
  Status s = cross_entropy_step(xv, tv, w, o, how, grad_scale, out_at(out, 0), at(loss, 1), at(lse, 1), one(scale, 1),
                                row_view(grad.get(), dtype_of<T>(), layout), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = cross_entropy_step(overv, tv, w, o, how, grad_scale, out_at(out, 1), at(loss, 2), at(lse, 2), one(scale, 1),
                         overv, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const int64_t n = rows * classes;
  const std::vector<T> want = copy_back<T>(grad_ref, n);
  EXPECT_TRUE(same_bits(copy_back<T>(grad, n), want)) << "dlogits";
  EXPECT_TRUE(same_bits(copy_back<T>(over, n), want)) << "dlogits over the logits";
  const std::vector<T> outs = copy_back<T>(out, 2), want_out = copy_back<T>(out_ref, 1);
  EXPECT_EQ(std::memcmp(&outs[0], &want_out[0], sizeof(T)), 0) << "out";
  EXPECT_EQ(std::memcmp(&outs[1], &want_out[0], sizeof(T)), 0) << "out, over the logits";
  const std::vector<Acc> losses = copy_back<Acc>(loss, 3 * rows), lses = copy_back<Acc>(lse, 3 * rows);
  for (int k = 1; k < 3; ++k) {
    EXPECT_EQ(std::memcmp(&losses[k * rows], &losses[0], rows * sizeof(Acc)), 0) << "loss " << k;
    EXPECT_EQ(std::memcmp(&lses[k * rows], &lses[0], rows * sizeof(Acc)), 0) << "lse " << k;
  }
  // The same bits must not be zeros: row 1 is ignored; the kept rows carry a gradient on (almost)
  // every class, float16 flushing the smallest.
  int64_t nonzero = 0, ignored_nonzero = 0;
  for (int64_t i = 0; i < n; ++i) (i / classes == 1 ? ignored_nonzero : nonzero) += to_double(want[i]) != 0.0;
  EXPECT_EQ(ignored_nonzero, 0) << "the ignored row";
  EXPECT_GE(nonzero, (rows - 1) * classes * 9 / 10) << "a gradient on the kept rows' classes";
}

TEST(CrossEntropyGpu, StepEqualsItsThreeCalls) {
  REDUCEKIT_REQUIRE_GPU();
  for (LossReduction how : {LossReduction::kMean, LossReduction::kSum}) {
    check_step<__nv_bfloat16>(37, 32000, true, how, 0.0);   // staged, one CTA a row
    check_step<__half>(5, 50257, false, how, 0.0);          // staged, odd rows
    check_step<__nv_bfloat16>(3, 128256, false, how, 0.0);  // staged over a cluster
    check_step<__nv_bfloat16>(4, 50257, true, how, 0.1);    // label smoothing: the row kernels
    check_step<float>(9, 4099, true, how, 0.0);
    check_step<float>(2, 50257, false, how, 0.0);
    check_step<float>(2, 256000, true, how, 0.0);           // staged over five 200 KiB shares
    check_step<double>(7, 1001, true, how, 0.0);
    if (testing::Test::HasFailure()) return;
  }
  // A mean over no kept row (row 0's target, 3, is the ignored index): NaN out and gradient, as
  // the calls apart give.
  check_step<__nv_bfloat16>(1, 32000, false, LossReduction::kMean, 0.0, 3);
}

TEST(CrossEntropyGpu, ArgumentErrorsNameTheArgument) {
  REDUCEKIT_REQUIRE_GPU();
  const int64_t rows = 4, classes = 10;
  DeviceBuffer x(rows * classes * 4), t(std::vector<int64_t>(rows, 1)), f(rows * 8), g(rows * classes * 4);
  const TensorView xv = row_view(x.get(), DType::kFloat32, {rows, classes, classes, 0});
  const TensorView tv = vector_view<int64_t>(t.get(), rows), lv = vector_view<float>(f.get(), rows);
  const TensorView sv = vector_view<float>(static_cast<float*>(f.get()) + rows, rows);
  const auto fails = [](const Status& s, const char* name) {
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.message().rfind(name, 0), 0u) << s.message();
  };
  TensorView bad_target = tv;
  bad_target.dtype = DType::kFloat32;
  fails(cross_entropy_forward(xv, bad_target, nullptr, {}, lv, sv, nullptr), "target");
  fails(cross_entropy_forward(xv, vector_view<int64_t>(t.get(), rows - 1), nullptr, {}, lv, sv, nullptr), "target");
  TensorView double_loss = lv;
  double_loss.dtype = DType::kFloat64;
  fails(cross_entropy_forward(xv, tv, nullptr, {}, double_loss, sv, nullptr), "loss");
  const TensorView short_weight = vector_view<float>(g.get(), classes - 1);
  fails(cross_entropy_forward(xv, tv, &short_weight, {}, lv, sv, nullptr), "weight");
  CrossEntropyOptions o;
  o.label_smoothing = 1.5;
  fails(cross_entropy_forward(xv, tv, nullptr, o, lv, sv, nullptr), "label_smoothing");
  o = {};
  o.softcap = -1;
  fails(cross_entropy_forward(xv, tv, nullptr, o, lv, sv, nullptr), "softcap");
  fails(cross_entropy_backward(xv, tv, nullptr, sv, lv, {}, xv, nullptr), "dlogits");
  // The fused op: dlogits over logits exactly is its in-place form; any other overlap is refused.
  DeviceBuffer gl(rows * 4), gd(rows * classes * 4);
  const TensorView glv = vector_view<float>(gl.get(), rows), gdv = row_view(gd.get(), DType::kFloat32, {rows, classes, classes, 0});
  EXPECT_TRUE(cross_entropy_fused(xv, tv, nullptr, glv, {}, lv, sv, gdv, nullptr).is_ok());
  EXPECT_TRUE(cross_entropy_fused(xv, tv, nullptr, glv, {}, lv, sv, xv, nullptr).is_ok());
  // The step: a reduction it has, one upstream gradient, every check before its first launch.
  DeviceBuffer so(8);
  const TensorView sov = vector_view<float>(so.get(), 1), one_gl = vector_view<float>(gl.get(), 1);
  EXPECT_TRUE(cross_entropy_step(xv, tv, nullptr, {}, LossReduction::kMean, 1.0, sov, lv, sv, one_gl, gdv, nullptr).is_ok());
  fails(cross_entropy_step(xv, tv, nullptr, {}, static_cast<LossReduction>(7), 1.0, sov, lv, sv, one_gl, gdv, nullptr), "reduction");
  fails(cross_entropy_step(xv, tv, nullptr, {}, LossReduction::kMean, 1.0, sov, lv, sv, glv, gdv, nullptr), "grad_loss");
  fails(cross_entropy_step(xv, tv, nullptr, {}, LossReduction::kSum, 1.0, vector_view<float>(gl.get(), 1), lv, sv,
                           one_gl, gdv, nullptr), "out");
  const TensorView shifted = row_view(static_cast<float*>(x.get()) + 1, DType::kFloat32, {rows - 1, classes, classes, 0});
  const TensorView first_rows = row_view(x.get(), DType::kFloat32, {rows - 1, classes, classes, 0});
  fails(cross_entropy_fused(first_rows, vector_view<int64_t>(t.get(), rows - 1), nullptr,
                            vector_view<float>(gl.get(), rows - 1), {}, vector_view<float>(f.get(), rows - 1),
                            vector_view<float>(static_cast<float*>(f.get()) + rows, rows - 1), shifted, nullptr),
        "dlogits");
  fails(cross_entropy_fused(xv, tv, nullptr, vector_view<float>(gl.get(), rows - 1), {}, lv, sv, gdv, nullptr),
        "grad_loss");
  fails(cross_entropy_fused(xv, tv, nullptr, glv, {}, lv, lv, gdv, nullptr), "loss");
  EXPECT_TRUE(cross_entropy_fused(xv, tv, nullptr, vector_view<float>(gl.get(), 1), {}, lv, sv, gdv, nullptr).is_ok())
      << "one upstream gradient for every row";
  fails(cross_entropy_backward(xv, tv, nullptr, sv, vector_view<float>(gl.get(), 2), {}, gdv, nullptr), "grad_loss");
  // cross_entropy_reduce: out and the denominator one value each, in float dtypes matching loss's.
  DeviceBuffer one(16);
  const TensorView outv = vector_view<float>(one.get(), 1);
  const TensorView denv = vector_view<float>(static_cast<float*>(one.get()) + 1, 1);
  EXPECT_TRUE(cross_entropy_reduce(&lv, &tv, nullptr, -100, LossReduction::kMean, outv, &denv, nullptr).is_ok());
  fails(cross_entropy_reduce(&lv, &tv, nullptr, -100, static_cast<LossReduction>(7), outv, &denv, nullptr),
        "reduction");
  fails(cross_entropy_reduce(&lv, &tv, nullptr, -100, LossReduction::kSum, vector_view<int64_t>(one.get(), 1), nullptr,
                             nullptr),
        "out");
  fails(cross_entropy_reduce(&lv, &tv, nullptr, -100, LossReduction::kSum, vector_view<float>(one.get(), 2), nullptr,
                             nullptr),
        "out");
  fails(cross_entropy_reduce(&lv, &tv, nullptr, -100, LossReduction::kSum, vector_view<double>(one.get(), 1), nullptr,
                             nullptr),
        "loss");
  const TensorView short_target = vector_view<int64_t>(t.get(), rows - 1);
  fails(cross_entropy_reduce(&lv, &short_target, nullptr, -100, LossReduction::kSum, outv, nullptr, nullptr), "loss");
  fails(cross_entropy_reduce(nullptr, nullptr, nullptr, -100, LossReduction::kSum, outv, nullptr, nullptr), "loss");
  fails(cross_entropy_reduce(&lv, nullptr, &short_weight, -100, LossReduction::kMean, outv, nullptr, nullptr),
        "weight");
  const TensorView double_denominator = vector_view<double>(one.get(), 1);
  fails(cross_entropy_reduce(&lv, &tv, &short_weight, -100, LossReduction::kMean, outv, &double_denominator, nullptr),
        "denominator");
  fails(cross_entropy_reduce(&lv, &tv, nullptr, -100, LossReduction::kSum, lv, nullptr, nullptr), "out");
  fails(cross_entropy_reduce(&lv, &tv, nullptr, -100, LossReduction::kSum, vector_view<float>(f.get(), 1), nullptr,
                             nullptr),
        "out");
  fails(cross_entropy_fused(xv, tv, nullptr, glv, {}, lv, sv, row_view(gd.get(), DType::kFloat16,
                                                                      {rows, classes, classes, 0}), nullptr),
        "dlogits");
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  TensorView transposed = xv;
  std::swap(transposed.sizes[0], transposed.sizes[1]);
  transposed.strides[0] = 1, transposed.strides[1] = classes;
  fails(cross_entropy_forward(transposed, vector_view<int64_t>(t.get(), classes), nullptr, {}, lv, sv, nullptr),
        "logits");
}

// ---- class-probability targets ------------------------------------------------------------

struct ProbsCase {
  int64_t rows, classes;
  int64_t logits_offset = 0, target_offset = 0, target_pad = 0;  // target rows classes + target_pad apart
  double smoothing = 0, z_scale = 0, softcap = 0;
  bool weights = false;
};

template <typename T> void check_probs_case(const ProbsCase& c) {
  using Acc = std::conditional_t<sizeof(T) == 8, double, float>;
  SCOPED_TRACE(testing::Message() << dtype_name(dtype_of<T>()) << " rows " << c.rows << " classes " << c.classes
                                  << " offsets " << c.logits_offset << "/" << c.target_offset << " target pad "
                                  << c.target_pad << " ls " << c.smoothing << " z " << c.z_scale << " cap " << c.softcap
                                  << (c.weights ? " weighted" : ""));
  const RowLayout xl{c.rows, c.classes, c.classes, c.logits_offset};
  const RowLayout pl{c.rows, c.classes, c.classes + c.target_pad, c.target_offset};
  const RowLayout dense{c.rows, c.classes, c.classes, 0};
  const std::vector<double> values = make_values(c.rows * c.classes, "randn", 95);
  const std::vector<double> raw_targets = make_values(c.rows * c.classes, "randn", 96);
  std::vector<T> ximage(xl.span()), pimage(pl.span());
  std::vector<double> logits(c.rows * c.classes), targets(c.rows * c.classes);  // as the kernels see them
  for (int64_t r = 0; r < c.rows; ++r) {
    // Each target row a softmax of its draws: probabilities summing to about 1.
    double total = 0;
    for (int64_t j = 0; j < c.classes; ++j) total += std::exp(raw_targets[r * c.classes + j]);
    for (int64_t j = 0; j < c.classes; ++j) {
      const T x = from_double<T>(3.0 * values[r * c.classes + j]);
      const T p = from_double<T>(std::exp(raw_targets[r * c.classes + j]) / total);
      ximage[xl.offset + r * xl.stride + j] = x, pimage[pl.offset + r * pl.stride + j] = p;
      logits[r * c.classes + j] = to_double(x), targets[r * c.classes + j] = to_double(p);
    }
  }
  const std::vector<double> weight = weights_for(c.classes);
  std::vector<Acc> weight_acc(weight.begin(), weight.end()), grad_acc(c.rows);
  const std::vector<double> grad_values = make_values(c.rows, "randn", 97);
  std::vector<double> grad(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) grad[r] = to_double(grad_acc[r] = static_cast<Acc>(grad_values[r]));

  DeviceBuffer dx(ximage), dp(pimage), dweight(weight_acc), dgrad(grad_acc);
  DeviceBuffer dloss(c.rows * sizeof(Acc)), dlse(c.rows * sizeof(Acc)), dmass(c.rows * sizeof(Acc));
  DeviceBuffer ddx(dense.span() * sizeof(T)), ddp(dense.span() * sizeof(T));
  ASSERT_TRUE(dx.get() && dp.get() && dweight.get() && dgrad.get() && dloss.get() && dlse.get() && dmass.get() &&
              ddx.get() && ddp.get());
  REDUCEKIT_CUDA_OK(cudaMemset(ddx.get(), 0xff, dense.span() * sizeof(T)));  // NaN where unwritten
  REDUCEKIT_CUDA_OK(cudaMemset(ddp.get(), 0xff, dense.span() * sizeof(T)));

  CrossEntropyOptions o;
  o.label_smoothing = c.smoothing, o.lse_square_scale = c.z_scale, o.softcap = c.softcap;
  const TensorView xv = row_view(dx.get(), dtype_of<T>(), xl), pv = row_view(dp.get(), dtype_of<T>(), pl);
  const TensorView wv = vector_view<Acc>(dweight.get(), c.classes);
  const TensorView lossv = vector_view<Acc>(dloss.get(), c.rows), lsev = vector_view<Acc>(dlse.get(), c.rows);
  const TensorView massv = vector_view<Acc>(dmass.get(), c.rows);
  const TensorView dxv = row_view(ddx.get(), dtype_of<T>(), dense), dpv = row_view(ddp.get(), dtype_of<T>(), dense);
  const TensorView* w = c.weights ? &wv : nullptr;
  Status s = cross_entropy_probs_forward(xv, pv, w, o, lossv, lsev, massv, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  s = cross_entropy_probs_backward(xv, pv, w, lsev, massv, vector_view<Acc>(dgrad.get(), c.rows), o, dxv, &dpv,
                                   nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<Acc> loss = copy_back<Acc>(dloss, c.rows);
  const std::vector<T> dlogits = copy_back<T>(ddx, dense.span()), dtarget = copy_back<T>(ddp, dense.span());

  reference::CrossEntropyOptions ro;
  ro.reduction = reference::LossReduction::kNone;
  ro.label_smoothing = c.smoothing, ro.lse_square_scale = c.z_scale, ro.softcap = c.softcap;
  ro.weight = c.weights ? weight.data() : nullptr;
  std::vector<double> want_loss(c.rows), want_dx(c.rows * c.classes), want_dp(c.rows * c.classes);
  ASSERT_TRUE(
      reference::cross_entropy_probs_forward(logits.data(), targets.data(), want_loss.data(), c.rows, c.classes, ro));
  ASSERT_TRUE(reference::cross_entropy_probs_backward(logits.data(), targets.data(), grad.data(), want_dx.data(),
                                                      want_dp.data(), c.rows, c.classes, ro));
  const double max_w = c.weights ? 2.0 : 1.0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double zmax = 0;
    for (int64_t j = 0; j < c.classes; ++j) zmax = std::max(zmax, std::fabs(logits[r * c.classes + j]));
    const double lse_scale = zmax + std::log(static_cast<double>(c.classes)) + 1;
    const double scale = max_w * lse_scale * (1 + 2 * c.z_scale * lse_scale) * 4;
    EXPECT_TRUE(close_enough<Acc>(loss[r], want_loss[r], scale)) << "loss row " << r << ": " << loss[r] << " vs "
                                                                  << want_loss[r];
    const double gscale = std::fabs(grad[r]) * max_w * (2 + 2 * c.z_scale * lse_scale) * 4;
    const double tscale = std::fabs(grad[r]) * max_w * 2 * lse_scale * 4;
    for (int64_t j = 0; j < c.classes; ++j) {
      const int64_t i = r * c.classes + j;
      if (!close_enough<T>(to_double(dlogits[i]), want_dx[i], gscale)) {
        ADD_FAILURE() << "dlogits row " << r << " class " << j << ": " << to_double(dlogits[i]) << " vs " << want_dx[i];
        return;
      }
      if (!close_enough<T>(to_double(dtarget[i]), want_dp[i], tscale)) {
        ADD_FAILURE() << "dtarget row " << r << " class " << j << ": " << to_double(dtarget[i]) << " vs " << want_dp[i];
        return;
      }
    }
  }
  // A row alone gives the bits it has in the batch (the last row: its own alignments).
  const int64_t last = c.rows - 1;
  DeviceBuffer one_loss(sizeof(Acc)), one_lse(sizeof(Acc)), one_mass(sizeof(Acc));
  ASSERT_TRUE(one_loss.get() && one_lse.get() && one_mass.get());
  TensorView x1 = row_view(static_cast<T*>(dx.get()) + xl.offset + last * xl.stride, dtype_of<T>(),
                           {1, c.classes, c.classes, 0});
  TensorView p1 = row_view(static_cast<T*>(dp.get()) + pl.offset + last * pl.stride, dtype_of<T>(),
                           {1, c.classes, c.classes, 0});
  s = cross_entropy_probs_forward(x1, p1, w, o, vector_view<Acc>(one_loss.get(), 1), vector_view<Acc>(one_lse.get(), 1),
                                  vector_view<Acc>(one_mass.get(), 1), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(copy_back<Acc>(one_loss, 1), std::vector<Acc>{loss[last]})) << "row alone";
  // The batch with every row on the prefetching forward (16-bit rows off their granules otherwise
  // read each granule once a warp): the same bits.
  const ScopedTuning prefetch_only("cross_entropy_probs_shared_granules", 0);
  DeviceBuffer again_loss(c.rows * sizeof(Acc)), again_lse(c.rows * sizeof(Acc)), again_mass(c.rows * sizeof(Acc));
  s = cross_entropy_probs_forward(xv, pv, w, o, vector_view<Acc>(again_loss.get(), c.rows),
                                  vector_view<Acc>(again_lse.get(), c.rows), vector_view<Acc>(again_mass.get(), c.rows),
                                  nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(copy_back<Acc>(again_loss, c.rows), loss)) << "the prefetching forward's losses";
  EXPECT_TRUE(same_bits(copy_back<Acc>(again_lse, c.rows), copy_back<Acc>(dlse, c.rows))) << "its lse";
  EXPECT_TRUE(same_bits(copy_back<Acc>(again_mass, c.rows), copy_back<Acc>(dmass, c.rows))) << "its mass";
}

template <typename T> void check_every_probs_case() {
  for (const ProbsCase& c : {ProbsCase{5, 1}, ProbsCase{37, 7, 1, 0, 3}, ProbsCase{16, 1000, 0, 1, 1},
                             ProbsCase{6, 50257, 3, 5, 1}, ProbsCase{4, 32000, 0, 0, 0, 0.1, 0, 0, true},
                             ProbsCase{8, 4099, 2, 7, 5, 0.2, 1e-3, 30.0, true}, ProbsCase{3, 131073, 1, 0, 0, 0, 1e-4, 0},
                             ProbsCase{8, 4096, 0, 0, 0, 1.0, 0, 0, true}, ProbsCase{7, 50257},
                             ProbsCase{9, 4099, 0, 0, 0, 0.1, 1e-3, 20.0, true}}) {
    check_probs_case<T>(c);
    if (testing::Test::HasFailure()) return;
  }
}

TEST(CrossEntropyGpu, ProbabilityTargetsMatchTheOracle) {
  REDUCEKIT_REQUIRE_GPU();
  check_every_probs_case<float>();
  check_every_probs_case<__nv_bfloat16>();
  check_every_probs_case<__half>();
  check_every_probs_case<double>();
}

// The loss of logits far from zero whose target sits on the largest logit is small, and keeps its
// digits: the pass keeps the target's weighted spread relative to the running max.
TEST(CrossEntropyGpu, ProbabilityTargetsKeepSmallLossesOfLargeLogits) {
  REDUCEKIT_REQUIRE_GPU();
  const int64_t classes = 3000;
  std::vector<float> x(classes), p(classes, 0.0f);
  for (int64_t j = 0; j < classes; ++j) x[j] = 6000.0f - 0.5f * static_cast<float>(j % 50) - (j == 17 ? 0 : 20.0f);
  p[17] = 1.0f;
  DeviceBuffer dx(x), dp(p), dl(4), ds(4), dm(4);
  const RowLayout l{1, classes, classes, 0};
  Status s = cross_entropy_probs_forward(row_view(dx.get(), DType::kFloat32, l), row_view(dp.get(), DType::kFloat32, l),
                                         nullptr, {}, vector_view<float>(dl.get(), 1), vector_view<float>(ds.get(), 1),
                                         vector_view<float>(dm.get(), 1), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> xd(x.begin(), x.end()), pd(p.begin(), p.end());
  double want = 0;
  ASSERT_TRUE(reference::cross_entropy_probs_forward(xd.data(), pd.data(), &want, 1, classes,
                                                     {reference::LossReduction::kNone}));
  const float got = copy_back<float>(dl, 1)[0];
  EXPECT_GT(want, 0.0);
  EXPECT_NEAR(got, want, 1e-5 * want + 1e-7) << "a loss of " << want << " at logits near 6000";
}

TEST(CrossEntropyGpu, ProbabilityTargetArgumentErrorsNameTheArgument) {
  REDUCEKIT_REQUIRE_GPU();
  const int64_t rows = 4, classes = 10;
  DeviceBuffer x(rows * classes * 4), p(rows * classes * 4), f(rows * 12), g(rows * classes * 4), h(rows * classes * 4);
  const RowLayout l{rows, classes, classes, 0};
  const TensorView xv = row_view(x.get(), DType::kFloat32, l), pv = row_view(p.get(), DType::kFloat32, l);
  const TensorView lv = vector_view<float>(f.get(), rows), sv = vector_view<float>(static_cast<float*>(f.get()) + rows, rows);
  const TensorView mv = vector_view<float>(static_cast<float*>(f.get()) + 2 * rows, rows);
  const TensorView gv = row_view(g.get(), DType::kFloat32, l), hv = row_view(h.get(), DType::kFloat32, l);
  const auto fails = [](const Status& s, const char* name) {
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.message().rfind(name, 0), 0u) << s.message();
  };
  EXPECT_TRUE(cross_entropy_probs_forward(xv, pv, nullptr, {}, lv, sv, mv, nullptr).is_ok());
  TensorView half_target = pv;
  half_target.dtype = DType::kFloat16;
  fails(cross_entropy_probs_forward(xv, half_target, nullptr, {}, lv, sv, mv, nullptr), "target");
  fails(cross_entropy_probs_forward(xv, row_view(p.get(), DType::kFloat32, {rows - 1, classes, classes, 0}), nullptr, {},
                                    lv, sv, mv, nullptr),
        "target");
  fails(cross_entropy_probs_forward(xv, pv, nullptr, {}, lv, sv, lv, nullptr), "loss");
  const TensorView short_weight = vector_view<float>(g.get(), classes - 1);
  fails(cross_entropy_probs_forward(xv, pv, &short_weight, {}, lv, sv, mv, nullptr), "weight");
  CrossEntropyOptions o;
  o.label_smoothing = -0.5;
  fails(cross_entropy_probs_forward(xv, pv, nullptr, o, lv, sv, mv, nullptr), "label_smoothing");
  const TensorView gl = vector_view<float>(static_cast<float*>(f.get()) + rows, rows);
  EXPECT_TRUE(cross_entropy_probs_backward(xv, pv, nullptr, sv, mv, gl, {}, gv, &hv, nullptr).is_ok());
  EXPECT_TRUE(cross_entropy_probs_backward(xv, pv, nullptr, sv, mv, gl, {}, gv, nullptr, nullptr).is_ok());
  fails(cross_entropy_probs_backward(xv, pv, nullptr, sv, mv, gl, {}, xv, nullptr, nullptr), "dlogits");
  fails(cross_entropy_probs_backward(xv, pv, nullptr, sv, mv, gl, {}, gv, &pv, nullptr), "dtarget");
  fails(cross_entropy_probs_backward(xv, pv, nullptr, sv, mv, gl, {}, gv, &gv, nullptr), "dlogits");
  fails(cross_entropy_probs_backward(xv, pv, nullptr, sv, vector_view<float>(f.get(), rows - 1), gl, {}, gv, nullptr,
                                     nullptr),
        "mass");
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace reducekit
