// SPDX-License-Identifier: Apache-2.0
// GPU tests of the softmax family against the float64 CPU oracle. Outputs are poisoned with
// NaN before each run, and the gaps between strided rows must still hold the poison after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "softmax_test_ops.hpp"
#include "reducekit/softmax.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

using namespace softmax_test;

// Row values by kind: "randn", "large" (1e4 * randn), or "special" (randn with an all -inf row,
// a constant row, and rows holding -inf, +inf and NaN).
std::vector<double> make_rows(const RowLayout& l, const std::string& kind, uint32_t seed) {
  std::vector<double> v = make_values(l.rows * l.cols, kind == "large" ? "large" : "randn", seed);
  if (kind == "special") {
    const double inf = std::numeric_limits<double>::infinity();
    auto row = [&](int64_t r) { return v.begin() + r * l.cols; };
    if (l.rows > 0) std::fill(row(0), row(0) + l.cols, -inf);
    if (l.rows > 1) std::fill(row(1), row(1) + l.cols, 3.5);
    if (l.rows > 2) row(2)[l.cols / 2] = -inf;
    if (l.rows > 3) row(3)[l.cols - 1] = inf;
    if (l.rows > 4) row(4)[0] = std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

template <typename T> std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_double(from_double<T>(v[i]));
  return r;
}

// Places dense rows into a strided host image of a device buffer; gaps get `filler`.
template <typename T> std::vector<T> to_image(const std::vector<double>& dense, const RowLayout& l, T filler) {
  std::vector<T> image(static_cast<std::size_t>(l.span()), filler);
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t c = 0; c < l.cols; ++c) image[l.offset + r * l.stride + c] = from_double<T>(dense[r * l.cols + c]);
  return image;
}

// The magnitude of the terms behind one row's outputs (see close_enough): the largest finite
// |output| for forward ops; for backward ops the largest |y| (|dy| + sum |y dy|) (softmax) or
// |dy| + exp(y) sum |dy| (log_softmax), since dx is a difference of such terms.
double term_scale(Op op, const double* a, const double* b, const double* want, int64_t cols) {
  double scale = 0, sum_abs = 0;
  if (op == Op::kSoftmax || op == Op::kLogSoftmax) {
    for (int64_t c = 0; c < cols; ++c)
      if (std::isfinite(want[c])) scale = std::max(scale, std::fabs(want[c]));
    return scale;
  }
  for (int64_t c = 0; c < cols; ++c) sum_abs += op == Op::kSoftmaxBackward ? std::fabs(a[c] * b[c]) : std::fabs(b[c]);
  for (int64_t c = 0; c < cols; ++c) {
    const double t = op == Op::kSoftmaxBackward ? std::fabs(a[c]) * (std::fabs(b[c]) + sum_abs)
                                                : std::fabs(b[c]) + std::exp(a[c]) * sum_abs;
    if (std::isfinite(t)) scale = std::max(scale, t);
  }
  return scale;
}

// Runs `op` on the GPU for one layout and value kind and compares with the oracle.
// `split`: forward ops get the workspace softmax_requirements asks for (rows that split must
// ask for one), zeroed once; its counters must be zero again after the call.
template <typename T>
void check_against_oracle(Op op, const RowLayout& l, const std::string& kind, uint32_t seed, bool split = false) {
  SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()) << " rows=" << l.rows
                                  << " cols=" << l.cols << " stride=" << l.stride << " offset=" << l.offset
                                  << " values=" << kind << (split ? " with workspace" : ""));
  const DType dtype = dtype_of<T>();
  const std::size_t n = static_cast<std::size_t>(l.rows * l.cols);
  const T poison = from_double<T>(std::numeric_limits<double>::quiet_NaN());

  // Inputs: forward reads x; backward reads (y, dy) with y the oracle's forward of x.
  std::vector<double> a = rounded<T>(make_rows(l, kind, seed)), b, want(n);
  if (is_backward(op)) {
    std::vector<double> y(n);
    if (op == Op::kSoftmaxBackward) reference::softmax_rows(a.data(), y.data(), l.rows, l.cols);
    else reference::log_softmax_rows(a.data(), y.data(), l.rows, l.cols);
    a = rounded<T>(y);
    b = rounded<T>(make_values(static_cast<int64_t>(n), "randn", seed + 1));
  }
  switch (op) {
    case Op::kSoftmax: reference::softmax_rows(a.data(), want.data(), l.rows, l.cols); break;
    case Op::kLogSoftmax: reference::log_softmax_rows(a.data(), want.data(), l.rows, l.cols); break;
    case Op::kSoftmaxBackward: reference::softmax_backward_rows(a.data(), b.data(), want.data(), l.rows, l.cols); break;
    default: reference::log_softmax_backward_rows(a.data(), b.data(), want.data(), l.rows, l.cols); break;
  }

  const std::size_t bytes = static_cast<std::size_t>(l.span() + 64) * sizeof(T);  // 64 guard elements
  DeviceBuffer da(bytes), db(bytes), dout(bytes);
  ASSERT_TRUE(da.get() && db.get() && dout.get());
  std::vector<T> out_image(bytes / sizeof(T), poison);
  REDUCEKIT_CUDA_OK(cudaMemcpy(da.get(), to_image<T>(a, l, T(0)).data(), l.span() * sizeof(T), cudaMemcpyHostToDevice));
  if (is_backward(op))
    REDUCEKIT_CUDA_OK(cudaMemcpy(db.get(), to_image<T>(b, l, T(0)).data(), l.span() * sizeof(T), cudaMemcpyHostToDevice));
  REDUCEKIT_CUDA_OK(cudaMemcpy(dout.get(), out_image.data(), bytes, cudaMemcpyHostToDevice));

  SoftmaxRequirements req;
  if (split) {
    ASSERT_FALSE(is_backward(op));
    const Status q = softmax_requirements(row_view(da.get(), dtype, l), 1, &req);
    ASSERT_TRUE(q.is_ok()) << q.message();
    ASSERT_GT(req.workspace_bytes, 0u) << "these rows should split";
  }
  DeviceBuffer workspace(req.workspace_bytes);
  if (split) prepare_split_workspace(workspace.get(), req.workspace_zeroed_bytes, req.workspace_bytes);
  const Workspace ws{workspace.get(), req.workspace_bytes};
  const Status s = run(op, row_view(da.get(), dtype, l), row_view(db.get(), dtype, l), row_view(dout.get(), dtype, l),
                          split ? &ws : nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
  if (split) expect_split_ran(workspace.get(), req.workspace_zeroed_bytes, req.workspace_bytes);
  std::vector<T> got(out_image.size());
  REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), dout.get(), bytes, cudaMemcpyDeviceToHost));

  // Nothing outside the rows may change: compare those bytes with the poison.
  int failures = 0;
  std::vector<char> inside(got.size(), 0);
  for (int64_t r = 0; r < l.rows; ++r) std::fill_n(inside.begin() + l.offset + r * l.stride, l.cols, 1);
  for (std::size_t i = 0; i < got.size() && failures < 5; ++i)
    if (!inside[i] && std::memcmp(&got[i], &poison, sizeof(T)) != 0) {
      ADD_FAILURE() << "element " << i << " outside the rows was written";
      ++failures;
    }
  for (int64_t r = 0; r < l.rows && failures < 5; ++r) {
    const double scale = term_scale(op, &a[r * l.cols], is_backward(op) ? &b[r * l.cols] : nullptr,
                                    &want[r * l.cols], l.cols);
    for (int64_t c = 0; c < l.cols && failures < 5; ++c) {
      const double w = want[r * l.cols + c];
      const double g = to_double(got[l.offset + r * l.stride + c]);
      if (!close_enough<T>(g, w, scale)) {
        ADD_FAILURE() << "row " << r << " col " << c << ": got " << g << ", want " << w;
        ++failures;
      }
    }
  }
}

const std::vector<int64_t> kRowLengths = {1,    2,    3,     31,    32,    33,    64,     127,    128,   781,
                                          1000, 2045, 2048,  4099,  8192,  12800, 32768,  40009,  50257, 65536,
                                          262144, 1 << 20};

int64_t rows_for(int64_t cols) { return std::clamp<int64_t>((1 << 21) / cols, 5, 67); }

template <typename T> void sweep(Op op) {
  for (int64_t cols : kRowLengths) {
    const int64_t rows = rows_for(cols);
    const int64_t aligned = (cols + 63) / 64 * 64 + 64;
    check_against_oracle<T>(op, {rows, cols, cols, 0}, "randn", 1);           // contiguous
    check_against_oracle<T>(op, {rows, cols, aligned, 0}, "special", 2);      // sliced, aligned rows
    check_against_oracle<T>(op, {rows, cols, cols + 1, 1}, "large", 3);       // base offset by one element
    if (::testing::Test::HasFailure()) return;                                // one bad length is enough
  }
}

class SoftmaxGpu : public ::testing::Test {
 protected:
  void SetUp() override { REDUCEKIT_REQUIRE_GPU(); }
};

// One test per dtype: NAME##Float32 runs SWEEP<float>(OP), and so on.
#define REDUCEKIT_DTYPE_TESTS(NAME, SWEEP, OP)                     \
  TEST_F(SoftmaxGpu, NAME##Float32) { SWEEP<float>(OP); }          \
  TEST_F(SoftmaxGpu, NAME##Float16) { SWEEP<__half>(OP); }         \
  TEST_F(SoftmaxGpu, NAME##BFloat16) { SWEEP<__nv_bfloat16>(OP); } \
  TEST_F(SoftmaxGpu, NAME##Float64) { SWEEP<double>(OP); }

REDUCEKIT_DTYPE_TESTS(Softmax, sweep, Op::kSoftmax)
REDUCEKIT_DTYPE_TESTS(LogSoftmax, sweep, Op::kLogSoftmax)
REDUCEKIT_DTYPE_TESTS(SoftmaxBackward, sweep, Op::kSoftmaxBackward)
REDUCEKIT_DTYPE_TESTS(LogSoftmaxBackward, sweep, Op::kLogSoftmaxBackward)

// 16-bit rows that fit one CTA run on looping CTAs with the next rows streaming into shared
// memory; the sweep's few rows give each CTA one row, so here rows outnumber resident CTAs.
TEST_F(SoftmaxGpu, RingKernelLoopsOverManyRows) {
  check_against_oracle<__nv_bfloat16>(Op::kSoftmax, {6000, 1000, 1000, 0}, "randn", 21);
  check_against_oracle<__half>(Op::kLogSoftmax, {6000, 1000, 1001, 1}, "special", 22);  // unaligned rows
  check_against_oracle<__nv_bfloat16>(Op::kSoftmaxBackward, {3000, 4096, 4096, 0}, "randn", 23);
  check_against_oracle<__half>(Op::kLogSoftmaxBackward, {3000, 2045, 2048, 0}, "randn", 24);
}

// Staged rows (row_staged.cuh: 16-bit rows and float32 rows of ragged length in shared memory,
// one 256-thread CTA a row at 16-40 KiB, one 512-thread CTA at 64-110 KiB, clusters of 2 to 8
// shares past 128 KiB) at every element offset, with -inf / NaN rows and large values; few rows,
// so the test also runs under compute-sanitizer.
TEST_F(SoftmaxGpu, StagedRowsAtEveryOffset) {
  for (int64_t offset = 0; offset < 8; ++offset) {
    const auto seed = static_cast<uint32_t>(offset);
    check_against_oracle<__nv_bfloat16>(offset % 2 ? Op::kLogSoftmax : Op::kSoftmax, {3, 50257, 50257 + offset, offset},
                                        offset % 3 ? "randn" : "special", 80 + seed);
    check_against_oracle<__half>(offset % 2 ? Op::kSoftmax : Op::kLogSoftmax,
                                 {2, 32769 + offset, 32769 + 2 * offset, offset}, "large", 90 + seed);
    // 256-thread CTAs (24-40 KiB rows).
    check_against_oracle<__half>(offset % 2 ? Op::kLogSoftmax : Op::kSoftmax,
                                 {3, 12289 + 1111 * offset, 20480 + offset, offset}, "special", 110 + seed);
    // Cluster rows: 2, 3, 5 and 8 shares; the share edges fall at every granule offset.
    const int64_t cluster_cols[] = {65537, 128256, 151936, 256000, 450553};
    const int64_t cols = cluster_cols[offset % 5] + offset;
    const Op op = offset % 2 ? Op::kSoftmax : Op::kLogSoftmax;
    check_against_oracle<__nv_bfloat16>(op, {2, cols, cols + 3 * offset, offset}, offset % 3 ? "randn" : "special",
                                        100 + seed);
    // float32 rows of ragged length, in the same bands: a 256-thread CTA, a 512-thread CTA,
    // clusters of 2 and 5.
    const int64_t float_cols[] = {8191, 20483, 50257, 128257};
    const int64_t fcols = float_cols[offset % 4] + 4 * (offset / 4);
    check_against_oracle<float>(offset % 4 < 2 ? Op::kSoftmax : Op::kLogSoftmax, {2, fcols, fcols + offset, offset},
                                offset % 2 ? "randn" : "special", 120 + seed);
  }
}

// ---- re-read rows (RowKernelLimits::reread_above_words) ------------------------------------

// Rows past one CTA's tile (up to 1 MiB) on small tiles, the second pass reading the row again,
// forced by the knob for every dtype (by default only 16-bit rows re-read here): 2-CTA cluster
// lengths, a stream length, odd strides and offsets, -inf / NaN rows, both backward ops.
TEST_F(SoftmaxGpu, RereadRows) {
  const ScopedTuning reread("reread_above_words", 16);
  // The staged bands come first (16-bit rows, and float32 rows of ragged length): off here.
  const ScopedTuning band0("staged0_threads", 0), band1("staged1_threads", 0), band2("staged2_threads", 0),
      band3("staged3_threads", 0);
  for (const int64_t small : {int64_t(1) << 30, int64_t(0)}) {  // tiles of 16 words, then of one vector
    SCOPED_TRACE(testing::Message() << "small tiles " << small);
    const ScopedTuning small_tiles("reread_small_tiles_from_bytes", small);
    check_against_oracle<float>(Op::kSoftmax, {3, 40009, 40009, 0}, "randn", 61);
    check_against_oracle<__nv_bfloat16>(Op::kLogSoftmax, {3, 65536, 65537, 1}, "special", 62);
    check_against_oracle<double>(Op::kSoftmax, {2, 32769, 32769, 0}, "large", 63);
    check_against_oracle<__half>(Op::kSoftmaxBackward, {3, 100003, 100003, 0}, "randn", 64);
    check_against_oracle<float>(Op::kLogSoftmaxBackward, {2, 131071, 131071, 0}, "randn", 65);
    check_against_oracle<float>(Op::kSoftmax, {5, 8193, 8200, 0}, "randn", 66);
  }
}

// ---- split rows: chunks over a cooperative grid, with a workspace ---------------------------

// The default plan splits only 16-bit rows (float32 rows measured faster on the stream kernel);
// the split kernel serves every dtype, so its float32 and float64 tests widen the rule with the
// planner's tuning knob while they run.
class SplitEveryDtype : ScopedTuning {
 public:
  SplitEveryDtype() : ScopedTuning("split_max_elem_bytes", 8) {}
};

// Every dtype splits 2^20-element rows (float32 64 chunks, 16-bit 32, float64 128 on an H200);
// 1000003 is a prime (its last chunk is cut mid-vector). Rows: a few, so the tests stay quick,
// except where rows outnumber what the grid holds at once (below).
template <typename T> void split_sweep(Op op) {
  std::optional<SplitEveryDtype> widen;
  if (sizeof(T) > 2) widen.emplace();
  const int64_t mega = 1 << 20, prime = 1000003;
  check_against_oracle<T>(op, {3, mega, mega, 0}, "randn", 31, true);                 // contiguous
  check_against_oracle<T>(op, {5, prime, prime + 61, 0}, "special", 32, true);        // sliced, -inf/NaN rows
  check_against_oracle<T>(op, {2, mega, mega + 1, 1}, "large", 33, true);             // base offset by one element
  check_against_oracle<T>(op, {2, prime, prime, 0}, "randn", 34, true);               // N not a multiple of a chunk
}

REDUCEKIT_DTYPE_TESTS(SoftmaxSplit, split_sweep, Op::kSoftmax)
REDUCEKIT_DTYPE_TESTS(LogSoftmaxSplit, split_sweep, Op::kLogSoftmax)

// Split rows re-read (RowSplitConfig::reread): rows of 2^20 with the threshold lowered to 2 MiB
// (float32 and float64: their elements do not split on chip), 16-bit ones with the on-chip split
// turned off and the threshold at 2 MiB.
// 1048583 cuts the last chunk mid-vector and leaves its last tile out; sliced and unaligned rows.
template <typename T> void reread_sweep(Op op) {
  std::optional<ScopedTuning> no_on_chip;
  if (sizeof(T) == 2) no_on_chip.emplace("split_max_elem_bytes", 1);
  const ScopedTuning reread("split_reread_from_bytes", int64_t(2) << 20);
  const int64_t mega = 1 << 20, odd = 1048583;
  check_against_oracle<T>(op, {3, mega, mega, 0}, "randn", 61, true);
  check_against_oracle<T>(op, {4, odd, odd + 61, 0}, "special", 62, true);
  check_against_oracle<T>(op, {2, mega, mega + 1, 1}, "large", 63, true);
}

REDUCEKIT_DTYPE_TESTS(SoftmaxRereadSplit, reread_sweep, Op::kSoftmax)
REDUCEKIT_DTYPE_TESTS(LogSoftmaxRereadSplit, reread_sweep, Op::kLogSoftmax)

// Items outnumber the grid several times over, so CTAs loop and rows straddle the grid's rounds
// (float64: 128 chunks a row on 132 CTAs; float32 9 x 64 chunks; bfloat16 20 x 32 chunks;
// float16 6 x 96 chunks).
TEST_F(SoftmaxGpu, SplitRowsOutnumberTheGrid) {
  const SplitEveryDtype widen;
  check_against_oracle<float>(Op::kSoftmax, {9, 1 << 20, 1 << 20, 0}, "randn", 41, true);
  check_against_oracle<__nv_bfloat16>(Op::kLogSoftmax, {20, 1 << 20, 1 << 20, 0}, "randn", 42, true);
  check_against_oracle<double>(Op::kSoftmax, {4, 1 << 20, (1 << 20) + 3, 0}, "large", 43, true);
  check_against_oracle<__half>(Op::kSoftmax, {6, 3 << 20, 3 << 20, 0}, "randn", 44, true);
}

// Output bits of (log_)softmax over `rows` rows from `first_row` of x (float32, cols a row),
// through the split path with a workspace zeroed once and reused by every call.
std::vector<float> split_bits(const DeviceBuffer& x, int64_t rows, int64_t cols, int64_t first_row, bool log,
                              const DeviceBuffer& tickets, const DeviceBuffer& stats) {
  DeviceBuffer y(rows * cols * sizeof(float));
  const RowLayout l{rows, cols, cols, 0};
  const TensorView xv = row_view(static_cast<float*>(x.get()) + first_row * cols, DType::kFloat32, l);
  SoftmaxRequirements req;
  EXPECT_TRUE(softmax_requirements(xv, 1, &req).is_ok());
  EXPECT_GT(req.workspace_zeroed_bytes, 0u);
  EXPECT_LE(req.workspace_zeroed_bytes, tickets.bytes());
  EXPECT_LE(req.workspace_bytes - req.workspace_zeroed_bytes, stats.bytes());
  const Workspace ws{stats.get(), stats.bytes(), tickets.get(), tickets.bytes()};
  const TensorView yv = row_view(y.get(), DType::kFloat32, l);
  const Status s = log ? log_softmax(xv, yv, 1, ws, nullptr) : softmax(xv, yv, 1, ws, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.message();
  std::vector<float> out(rows * cols);
  EXPECT_EQ(cudaMemcpy(out.data(), y.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void split_rows_deterministic_and_batch_invariant() {
  const int64_t cols = 1 << 20, rows = 12;  // 768 chunks on chip (132 CTAs), 384 re-read (264 CTAs)
  const std::vector<double> values = make_values(rows * cols, "randn", 51);
  std::vector<float> host(values.begin(), values.end());
  DeviceBuffer x(host.size() * sizeof(float));
  REDUCEKIT_CUDA_OK(cudaMemcpy(x.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  SoftmaxRequirements req;
  ASSERT_TRUE(softmax_requirements(row_view(x.get(), DType::kFloat32, {rows, cols, cols, 0}), 1, &req).is_ok());
  // The counters apart (Workspace::tickets): in one contiguous workspace a call of fewer rows
  // would lay its statistics over the batch's counters. Zeroed once: every call leaves them zero;
  // the statistics' 0xff bytes show whether the split ran.
  DeviceBuffer tickets(req.workspace_zeroed_bytes), stats(req.workspace_bytes - req.workspace_zeroed_bytes);
  REDUCEKIT_CUDA_OK(cudaMemset(tickets.get(), 0, tickets.bytes()));
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    REDUCEKIT_CUDA_OK(cudaMemset(stats.get(), 0xff, stats.bytes()));
    const std::vector<float> batch = split_bits(x, rows, cols, 0, log, tickets, stats);
    expect_split_ran(tickets.get(), tickets.bytes(), stats.get(), stats.bytes());
    EXPECT_EQ(batch, split_bits(x, rows, cols, 0, log, tickets, stats)) << "two runs differ";
    for (int64_t r : {int64_t(0), int64_t(5), rows - 1}) {
      const std::vector<float> alone = split_bits(x, 1, cols, r, log, tickets, stats);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + r * cols))
          << "row " << r << " alone differs from the same row in the batch";
    }
    const std::vector<float> three = split_bits(x, 3, cols, 4, log, tickets, stats);
    EXPECT_TRUE(std::equal(three.begin(), three.end(), batch.begin() + 4 * cols)) << "rows 4..6 differ";
  }
}

// On chip (the split widened to float32) and re-read (float32's rows of 4 MiB, the threshold
// set to them).
TEST_F(SoftmaxGpu, SplitRowsDeterministicAndBatchInvariant) {
  for (bool on_chip : {true, false}) {
    SCOPED_TRACE(on_chip ? "on chip" : "re-read");
    std::optional<SplitEveryDtype> widen;
    std::optional<ScopedTuning> reread;
    if (on_chip) widen.emplace();
    else reread.emplace("split_reread_from_bytes", int64_t(4) << 20);
    split_rows_deterministic_and_batch_invariant();
  }
}

// The counters may live apart (Workspace::tickets), and the workspace is checked before any work.
TEST_F(SoftmaxGpu, SplitWorkspaceApartAndChecked) {
  const SplitEveryDtype widen;
  const RowLayout l{2, 1 << 20, 1 << 20, 0};
  DeviceBuffer x(l.span() * sizeof(float)), y(l.span() * sizeof(float));
  REDUCEKIT_CUDA_OK(cudaMemset(x.get(), 0, l.span() * sizeof(float)));
  REDUCEKIT_CUDA_OK(cudaMemset(y.get(), 0x5a, l.span() * sizeof(float)));
  const TensorView xv = row_view(x.get(), DType::kFloat32, l), yv = row_view(y.get(), DType::kFloat32, l);
  SoftmaxRequirements req;
  ASSERT_TRUE(softmax_requirements(xv, -1, &req).is_ok());
  ASSERT_GT(req.workspace_zeroed_bytes, 0u);
  ASSERT_GT(req.workspace_bytes, req.workspace_zeroed_bytes);
  DeviceBuffer tickets(req.workspace_zeroed_bytes), rest(req.workspace_bytes - req.workspace_zeroed_bytes);
  REDUCEKIT_CUDA_OK(cudaMemset(tickets.get(), 0, tickets.bytes()));

  auto expect_workspace_error = [&](const Workspace& ws) {
    const Status s = softmax(xv, yv, 1, ws, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_EQ(s.message().rfind("workspace:", 0), 0u) << s.message();
  };
  expect_workspace_error(Workspace{rest.get(), req.workspace_bytes - 1});  // too small
  expect_workspace_error(Workspace{static_cast<char*>(rest.get()) + 4, req.workspace_bytes});  // misaligned
  expect_workspace_error(Workspace{rest.get(), rest.bytes(), tickets.get(), 4});  // counters too small
  std::vector<unsigned char> untouched(l.span() * sizeof(float));
  REDUCEKIT_CUDA_OK(cudaMemcpy(untouched.data(), y.get(), untouched.size(), cudaMemcpyDeviceToHost));
  for (unsigned char b : untouched) ASSERT_EQ(b, 0x5a) << "a rejected call wrote to y";

  const Workspace apart{rest.get(), rest.bytes(), tickets.get(), tickets.bytes()};
  ASSERT_TRUE(softmax(xv, yv, 1, apart, nullptr).is_ok());
  ASSERT_TRUE(log_softmax(xv, yv, 1, apart, nullptr).is_ok());
  std::vector<float> got(l.span());
  REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), y.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const float want = -std::log(float(l.cols));  // log_softmax of a constant row
  for (std::size_t i = 0; i < got.size(); i += 4099) ASSERT_NEAR(got[i], want, 1e-5f) << i;
  std::vector<unsigned char> counters(tickets.bytes());
  REDUCEKIT_CUDA_OK(cudaMemcpy(counters.data(), tickets.get(), counters.size(), cudaMemcpyDeviceToHost));
  for (unsigned char c : counters) ASSERT_EQ(c, 0) << "counters left nonzero";

  // No workspace at all, or an empty one: the stream kernel runs the rows.
  ASSERT_TRUE(softmax(xv, yv, 1, Workspace{}, nullptr).is_ok());
  // Rows that do not split need none.
  SoftmaxRequirements small;
  ASSERT_TRUE(softmax_requirements(row_view(x.get(), DType::kFloat32, {64, 4096, 4096, 0}), 1, &small).is_ok());
  EXPECT_EQ(small.workspace_bytes, 0u);
  EXPECT_EQ(small.workspace_zeroed_bytes, 0u);
  EXPECT_EQ(softmax_requirements(xv, 2, &small).code(), StatusCode::kInvalidArgument);
}

// Runs softmax over `rows` rows of a device buffer of random floats and returns the output bits.
std::vector<float> softmax_bits(const DeviceBuffer& x, int64_t rows, int64_t cols, int64_t first_row) {
  DeviceBuffer y(rows * cols * sizeof(float));
  const RowLayout l{rows, cols, cols, 0};
  TensorView xv = row_view(static_cast<float*>(x.get()) + first_row * cols, DType::kFloat32, l);
  EXPECT_TRUE(softmax(xv, row_view(y.get(), DType::kFloat32, l), -1, nullptr).is_ok());
  std::vector<float> out(rows * cols);
  EXPECT_EQ(cudaMemcpy(out.data(), y.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

TEST_F(SoftmaxGpu, DeterministicAndBatchInvariant) {
  for (int64_t cols : {1000, 4096, 262144}) {
    SCOPED_TRACE(testing::Message() << "cols=" << cols);
    const int64_t rows = cols >= 262144 ? 64 : 4096;
    const std::vector<double> values = make_values(rows * cols, "randn", 7);
    std::vector<float> host(values.begin(), values.end());
    DeviceBuffer x(host.size() * sizeof(float));
    REDUCEKIT_CUDA_OK(cudaMemcpy(x.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    const std::vector<float> batch = softmax_bits(x, rows, cols, 0);
    EXPECT_EQ(batch, softmax_bits(x, rows, cols, 0)) << "two runs differ";
    for (int64_t r : {int64_t(0), rows / 2 + 1, rows - 1}) {
      const std::vector<float> alone = softmax_bits(x, 1, cols, r);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + r * cols))
          << "row " << r << " alone differs from the same row in the batch";
    }
  }
}

TEST_F(SoftmaxGpu, InPlace) {
  const RowLayout l{33, 4099, 4099, 0};
  const std::vector<double> values = make_values(l.rows * l.cols, "randn", 11);
  std::vector<float> host(values.begin(), values.end()), got(host.size());
  std::vector<double> want(values.size()), x(host.begin(), host.end());
  reference::softmax_rows(x.data(), want.data(), l.rows, l.cols);
  DeviceBuffer d(host.size() * sizeof(float));
  REDUCEKIT_CUDA_OK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  const TensorView v = row_view(d.get(), DType::kFloat32, l);
  ASSERT_TRUE(softmax(v, v, 1, nullptr).is_ok());
  REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), d.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(close_enough<float>(got[i], want[i], 1.0)) << i;
}

// Deterministic pseudo-random value of element i, computable on host and device alike.
__host__ __device__ inline float hashed_value(uint64_t i) {
  return static_cast<float>((i * 2654435761ull) % 1000003ull) * (8.0f / 1000003.0f) - 4.0f;
}

__global__ void fill_hashed(__nv_bfloat16* x, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(hashed_value(i));
}

TEST_F(SoftmaxGpu, MoreThanTwoToThe31Elements) {
  const int64_t cols = 1024, rows = (int64_t(1) << 21) + 3;  // 2^31 + 3072 elements
  const uint64_t n = uint64_t(rows) * cols;
  DeviceBuffer x(n * 2), y(n * 2);
  if (!x.get() || !y.get()) GTEST_SKIP() << "not enough device memory for an 8.6 GB test";
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(x.get()), n);
  REDUCEKIT_CUDA_OK(cudaMemset(y.get(), 0xff, n * 2));
  const RowLayout l{rows, cols, cols, 0};
  ASSERT_TRUE(softmax(row_view(x.get(), DType::kBFloat16, l), row_view(y.get(), DType::kBFloat16, l), 1, nullptr).is_ok());
  for (int64_t r : {int64_t(0), int64_t(1) << 20, (int64_t(1) << 21) + 1, rows - 1}) {
    std::vector<__nv_bfloat16> got(cols);
    REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), static_cast<__nv_bfloat16*>(y.get()) + r * cols, cols * 2,
                                 cudaMemcpyDeviceToHost));
    std::vector<double> in(cols), want(cols);
    for (int64_t c = 0; c < cols; ++c) in[c] = to_double(from_double<__nv_bfloat16>(hashed_value(uint64_t(r) * cols + c)));
    reference::softmax_rows(in.data(), want.data(), 1, cols);
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_TRUE(close_enough<__nv_bfloat16>(to_double(got[c]), want[c], 1.0)) << "row " << r << " col " << c;
  }
}

// ---- bad input: a clear Status naming the argument, and the output untouched -----------------

class SoftmaxErrors : public ::testing::Test {
 protected:
  static TensorView matrix(void* data, DType dtype, int device) {
    TensorView v = row_view(data, dtype, {4, 8, 8, 0});
    v.device = device;
    return v;
  }
};

TEST_F(SoftmaxErrors, RejectsIntegerAndHostTensorsWithoutTouchingMemory) {
  float host_y[32];
  std::fill(std::begin(host_y), std::end(host_y), 42.0f);
  int64_t ints[32] = {};
  Status s = softmax(matrix(ints, DType::kInt64, 0), matrix(host_y, DType::kFloat32, 0), 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("x:", 0), 0u) << s.message();
  float host_x[32] = {};
  s = log_softmax(matrix(host_x, DType::kFloat32, kHostDevice), matrix(host_y, DType::kFloat32, kHostDevice), 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x: expected a CUDA tensor"), std::string::npos) << s.message();
  for (float v : host_y) EXPECT_EQ(v, 42.0f);
}

TEST_F(SoftmaxErrors, RejectsBadDimShapeDtypeDeviceAndOverlap) {
  REDUCEKIT_REQUIRE_GPU();
  DeviceBuffer x(4096), y(4096);
  REDUCEKIT_CUDA_OK(cudaMemset(y.get(), 0x5a, 4096));
  const TensorView xv = matrix(x.get(), DType::kFloat32, 0);
  TensorView yv = matrix(y.get(), DType::kFloat32, 0);
  auto expect_error = [&](const Status& s, StatusCode code, const std::string& starts) {
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_EQ(s.message().rfind(starts, 0), 0u) << s.message();
  };
  expect_error(softmax(xv, yv, 2, nullptr), StatusCode::kInvalidArgument, "dim:");
  expect_error(softmax(xv, yv, -3, nullptr), StatusCode::kInvalidArgument, "dim:");
  TensorView wrong_shape = yv;
  wrong_shape.sizes[1] = 7;
  expect_error(softmax(xv, wrong_shape, 1, nullptr), StatusCode::kInvalidArgument, "y:");
  TensorView wrong_dtype = yv;
  wrong_dtype.dtype = DType::kFloat16;
  expect_error(softmax(xv, wrong_dtype, 1, nullptr), StatusCode::kInvalidArgument, "y:");
  TensorView other_device = yv;
  other_device.device = 1;
  expect_error(softmax(xv, other_device, 1, nullptr), StatusCode::kInvalidArgument, "y:");
  TensorView shifted = xv;
  shifted.data = static_cast<float*>(x.get()) + 1;
  expect_error(softmax(xv, shifted, 1, nullptr), StatusCode::kInvalidArgument, "y:");
  TensorView dy = yv;
  dy.sizes[0] = 3;
  expect_error(softmax_backward(yv, dy, xv, 1, nullptr), StatusCode::kInvalidArgument, "dy:");
  TensorView column_major = xv;  // dim 1 with stride 4: not the innermost dim
  column_major.strides[0] = 1;
  column_major.strides[1] = 4;
  expect_error(softmax(column_major, yv, 1, nullptr), StatusCode::kUnsupported, "x:");

  std::vector<unsigned char> after(4096);
  REDUCEKIT_CUDA_OK(cudaMemcpy(after.data(), y.get(), 4096, cudaMemcpyDeviceToHost));
  for (unsigned char b : after) ASSERT_EQ(b, 0x5a) << "a rejected call wrote to y";
}

}  // namespace
}  // namespace reducekit
