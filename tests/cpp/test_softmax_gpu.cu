// GPU tests of the softmax family against the float64 CPU oracle. Outputs are poisoned with
// NaN before each run, and the gaps between strided rows must still hold the poison after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.cuh"
#include "reducekit/softmax.hpp"
#include "reference/reference.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

enum class Op { kSoftmax, kLogSoftmax, kSoftmaxBackward, kLogSoftmaxBackward };
const char* op_name(Op op) {
  switch (op) {
    case Op::kSoftmax: return "softmax";
    case Op::kLogSoftmax: return "log_softmax";
    case Op::kSoftmaxBackward: return "softmax_backward";
    default: return "log_softmax_backward";
  }
}
bool is_backward(Op op) { return op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward; }

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

template <typename T> Status run(Op op, const TensorView& a, const TensorView& b, const TensorView& out) {
  switch (op) {
    case Op::kSoftmax: return softmax(a, out, 1, nullptr);
    case Op::kLogSoftmax: return log_softmax(a, out, 1, nullptr);
    case Op::kSoftmaxBackward: return softmax_backward(a, b, out, 1, nullptr);
    default: return log_softmax_backward(a, b, out, 1, nullptr);
  }
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
template <typename T> void check_against_oracle(Op op, const RowLayout& l, const std::string& kind, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << op_name(op) << " " << dtype_name(dtype_of<T>()) << " rows=" << l.rows
                                  << " cols=" << l.cols << " stride=" << l.stride << " offset=" << l.offset
                                  << " values=" << kind);
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

  const Status s = run<T>(op, row_view(da.get(), dtype, l), row_view(db.get(), dtype, l), row_view(dout.get(), dtype, l));
  ASSERT_TRUE(s.is_ok()) << s.message();
  REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
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
                                          1000, 2045, 2048,  4099,  8192,  12800, 32768,  40009,  65536, 262144,
                                          1 << 20};

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

#define REDUCEKIT_SWEEP_TEST(NAME, OP)                           \
  TEST_F(SoftmaxGpu, NAME##Float32) { sweep<float>(OP); }         \
  TEST_F(SoftmaxGpu, NAME##Float16) { sweep<__half>(OP); }        \
  TEST_F(SoftmaxGpu, NAME##BFloat16) { sweep<__nv_bfloat16>(OP); } \
  TEST_F(SoftmaxGpu, NAME##Float64) { sweep<double>(OP); }

REDUCEKIT_SWEEP_TEST(Softmax, Op::kSoftmax)
REDUCEKIT_SWEEP_TEST(LogSoftmax, Op::kLogSoftmax)
REDUCEKIT_SWEEP_TEST(SoftmaxBackward, Op::kSoftmaxBackward)
REDUCEKIT_SWEEP_TEST(LogSoftmaxBackward, Op::kLogSoftmaxBackward)

// 16-bit rows that fit one CTA run on looping CTAs with the next rows streaming into shared
// memory; the sweep's few rows give each CTA one row, so here rows outnumber resident CTAs.
TEST_F(SoftmaxGpu, RingKernelLoopsOverManyRows) {
  check_against_oracle<__nv_bfloat16>(Op::kSoftmax, {6000, 1000, 1000, 0}, "randn", 21);
  check_against_oracle<__half>(Op::kLogSoftmax, {6000, 1000, 1001, 1}, "special", 22);  // unaligned rows
  check_against_oracle<__nv_bfloat16>(Op::kSoftmaxBackward, {3000, 4096, 4096, 0}, "randn", 23);
  check_against_oracle<__half>(Op::kLogSoftmaxBackward, {3000, 2045, 2048, 0}, "randn", 24);
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
