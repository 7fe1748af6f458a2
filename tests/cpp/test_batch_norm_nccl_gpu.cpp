// SPDX-License-Identifier: Apache-2.0
// GPU tests of SyncBatchNorm over NCCL (<reducekit/batch_norm_nccl.hpp>): one rank on device 0
// against the single-GPU batch_norm, and 2+ ranks (a thread a GPU, where there are two GPUs or
// more) against one GPU's run on the concatenated batch, statistics bitwise equal on every rank.
// Built only with reducekit_nccl. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.hpp"
#include "reducekit/batch_norm.hpp"
#include "reducekit/batch_norm_nccl.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

constexpr double kEps = 1e-5, kMomentum = 0.1;

// The shape of a batch: [n, c, h, w], contiguous or channels-last. Both layouts keep a batch's
// samples in one stretch of memory, so ranks' batches concatenate in memory.
struct Shape {
  int64_t n, c, h, w;
  bool channels_last;
  int64_t sample() const { return c * h * w; }
};

TensorView x_view(void* data, const Shape& s, int device) {
  TensorView v;
  v.data = data, v.dtype = DType::kFloat32, v.device = device, v.rank = 4;
  const int64_t sizes[4] = {s.n, s.c, s.h, s.w};
  for (int d = 0; d < 4; ++d) v.sizes[d] = sizes[d];
  if (s.channels_last) {
    v.strides[1] = 1, v.strides[3] = s.c, v.strides[2] = s.c * s.w, v.strides[0] = s.c * s.w * s.h;
  } else {
    v.strides[3] = 1, v.strides[2] = s.w, v.strides[1] = s.h * s.w, v.strides[0] = s.c * s.h * s.w;
  }
  return v;
}
TensorView vec_view(void* data, int64_t c, int device) {
  return make_contiguous_view(data, DType::kFloat32, {c}, device);
}

std::vector<float> download(const DeviceBuffer& b, std::size_t count) {
  std::vector<float> out(count);
  if (count > 0) {
    EXPECT_EQ(cudaMemcpy(out.data(), b.get(), count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return out;
}
std::vector<float> floats(int64_t n, uint32_t seed, double shift) {
  std::vector<double> v = make_values(n, "normal", seed);
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(shift + v[i]);
  return out;
}

// Within float32 accumulation of the largest value (plus a relative 1e-5).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                  double scale_floor = 1.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = scale_floor;
  for (float v : want) scale = std::max(scale, std::fabs(double(v)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "]";
      continue;
    }
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), 1e-5 * std::fabs(double(want[i])) + 2e-5 * scale)
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

// One rank's (or one GPU's) results of a forward and a backward.
struct Results {
  std::vector<float> y, mean, invstd, running_mean, running_var, dx, dweight, dbias;
};

// The device tensors of one call on `device`: x, dy and the per-channel vectors.
struct Buffers {
  Shape s;
  int device;
  DeviceBuffer x, dy, y, dx, w, b, rm, rv, mean, invstd, dw, db;
  Buffers(const Shape& shape, int dev, const std::vector<float>& xh, const std::vector<float>& dyh,
          const std::vector<float>& wh, const std::vector<float>& bh)
      : s(shape), device(dev), x(xh), dy(dyh), y(xh.size() * 4), dx(xh.size() * 4), w(wh), b(bh),
        rm(std::vector<float>(shape.c, 0.5f)), rv(std::vector<float>(shape.c, 2.0f)), mean(shape.c * 4),
        invstd(shape.c * 4), dw(shape.c * 4), db(shape.c * 4) {}
  TensorView big(const DeviceBuffer& d) const { return x_view(d.get(), s, device); }
  TensorView vec(const DeviceBuffer& d) const { return vec_view(d.get(), s.c, device); }
  Results fetch() const {
    const std::size_t numel = static_cast<std::size_t>(s.n * s.sample()), c = static_cast<std::size_t>(s.c);
    return {download(y, numel),  download(mean, c), download(invstd, c), download(rm, c),
            download(rv, c),     download(dx, numel), download(dw, c),   download(db, c)};
  }
};

// The single-GPU batch_norm on the buffers (device 0 current).
Results run_single(Buffers& in) {
  const TensorView x = in.big(in.x), dy = in.big(in.dy), y = in.big(in.y), dx = in.big(in.dx);
  const TensorView w = in.vec(in.w), b = in.vec(in.b), rm = in.vec(in.rm), rv = in.vec(in.rv);
  const TensorView mean = in.vec(in.mean), invstd = in.vec(in.invstd), dw = in.vec(in.dw), db = in.vec(in.db);
  BatchNormRequirements req;
  Status st = batch_norm_requirements(x, &req);
  EXPECT_TRUE(st.is_ok()) << st.message();
  DeviceBuffer ws(req.workspace_bytes);
  st = batch_norm_training_forward(x, &w, &b, &rm, &rv, {kMomentum, kEps}, y, mean, invstd,
                                   {ws.get(), req.workspace_bytes}, nullptr);
  EXPECT_TRUE(st.is_ok()) << st.message();
  st = batch_norm_backward(dy, x, &w, mean, invstd, true, &dx, &dw, &db, {ws.get(), req.workspace_bytes}, nullptr);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return in.fetch();
}

// sync_batch_norm forward and backward on the buffers over `comm` (the buffers' device current).
Results run_sync(Buffers& in, ncclComm_t comm, Status* status) {
  const TensorView x = in.big(in.x), dy = in.big(in.dy), y = in.big(in.y), dx = in.big(in.dx);
  const TensorView w = in.vec(in.w), b = in.vec(in.b), rm = in.vec(in.rm), rv = in.vec(in.rv);
  const TensorView mean = in.vec(in.mean), invstd = in.vec(in.invstd), dw = in.vec(in.dw), db = in.vec(in.db);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  BatchNormRequirements req;
  *status = sync_batch_norm_requirements(x, comm, &req);
  if (status->is_ok()) {
    DeviceBuffer ws(req.workspace_bytes);
    const Workspace workspace{ws.get(), req.workspace_bytes};
    *status = sync_batch_norm_training_forward(x, &w, &b, &rm, &rv, {kMomentum, kEps}, y, mean, invstd, workspace,
                                               comm, stream);
    if (status->is_ok())
      *status = sync_batch_norm_backward(dy, x, &w, mean, invstd, &dx, &dw, &db, workspace, comm, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess && status->is_ok())
      *status = Status::cuda_error(cudaGetErrorString(cudaGetLastError()));
  }
  cudaStreamDestroy(stream);
  return in.fetch();
}

class BatchNormNcclGpu : public testing::Test {
 protected:
  void SetUp() override {
    REDUCEKIT_REQUIRE_GPU();
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off on the shared machines
  }
};

// A group of one rank: the statistics, y and the gradients of the single-GPU batch_norm.
TEST_F(BatchNormNcclGpu, OneRankMatchesSingleGpu) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclComm_t comm = nullptr;
  const int devices[1] = {0};
  ASSERT_EQ(ncclCommInitAll(&comm, 1, devices), ncclSuccess);
  for (const Shape s : {Shape{4, 3, 7, 5, false}, Shape{8, 64, 14, 14, false}, Shape{4, 3, 7, 5, true},
                        Shape{8, 64, 14, 14, true}, Shape{2, 16, 1, 1, true}}) {
    SCOPED_TRACE(testing::Message() << "[" << s.n << ", " << s.c << ", " << s.h << ", " << s.w << "] "
                                    << (s.channels_last ? "channels-last" : "contiguous"));
    const int64_t numel = s.n * s.sample();
    const auto xh = floats(numel, 11, 3.0), dyh = floats(numel, 12, 0.0);
    const auto wh = floats(s.c, 13, 1.0), bh = floats(s.c, 14, 0.0);
    Buffers single(s, 0, xh, dyh, wh, bh), sync(s, 0, xh, dyh, wh, bh);
    const Results want = run_single(single);
    Status st;
    const Results got = run_sync(sync, comm, &st);
    ASSERT_TRUE(st.is_ok()) << st.message();
    expect_close(got.mean, want.mean, "save_mean");
    expect_close(got.invstd, want.invstd, "save_invstd");
    expect_close(got.running_mean, want.running_mean, "running_mean");
    expect_close(got.running_var, want.running_var, "running_var");
    expect_close(got.y, want.y, "y");
    expect_close(got.dx, want.dx, "dx");
    expect_close(got.dweight, want.dweight, "dweight");
    expect_close(got.dbias, want.dbias, "dbias");
    // Channels-last training forwards always take the three passes, whose per-channel moments the
    // packet carries unchanged through a one-rank merge: the same statistics bit for bit.
    if (s.channels_last) {
      EXPECT_EQ(0, std::memcmp(got.mean.data(), want.mean.data(), s.c * sizeof(float))) << "save_mean bits";
      EXPECT_EQ(0, std::memcmp(got.invstd.data(), want.invstd.data(), s.c * sizeof(float))) << "save_invstd bits";
    }
  }
  ncclCommDestroy(comm);
}

// Argument errors come back as Status, before any collective.
TEST_F(BatchNormNcclGpu, RejectsBadArguments) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const Shape s{2, 3, 4, 4, false};
  DeviceBuffer x(s.n * s.sample() * 4), packet(s.c * 3 * 8);
  BatchNormRequirements req;
  Status st = sync_batch_norm_requirements(x_view(x.get(), s, 0), nullptr, &req);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("comm"), std::string::npos) << st.message();
  // A packet of the wrong width.
  const TensorView bad = make_contiguous_view(packet.get(), DType::kFloat64, {s.c, 2}, 0);
  st = batch_norm_moments(x_view(x.get(), s, 0), bad, {}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("packet"), std::string::npos) << st.message();
}

// R ranks, a thread a GPU, against one GPU's run on the concatenated batch.
void check_ranks(const std::vector<int64_t>& batch, int64_t c, int64_t h, int64_t w, bool channels_last) {
  const int ranks = static_cast<int>(batch.size());
  SCOPED_TRACE(testing::Message() << ranks << " ranks, C " << c << ", " << h << "x" << w << " "
                                  << (channels_last ? "channels-last" : "contiguous"));
  const int64_t total = std::accumulate(batch.begin(), batch.end(), int64_t(0));
  const Shape whole{total, c, h, w, channels_last};
  const int64_t sample = whole.sample();
  const auto xh = floats(total * sample, 21, -2.0), dyh = floats(total * sample, 22, 0.0);
  const auto wh = floats(c, 23, 1.0), bh = floats(c, 24, 0.0);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  Results want;
  {
    Buffers single(whole, 0, xh, dyh, wh, bh);
    want = run_single(single);
  }
  std::vector<ncclComm_t> comms(ranks);
  std::vector<int> devices(ranks);
  std::iota(devices.begin(), devices.end(), 0);
  ASSERT_EQ(ncclCommInitAll(comms.data(), ranks, devices.data()), ncclSuccess);
  std::vector<Results> got(ranks);
  std::vector<Status> status(ranks);
  std::vector<std::thread> threads;
  int64_t first = 0;
  for (int r = 0; r < ranks; ++r) {
    const int64_t begin = first * sample, end = (first + batch[r]) * sample;
    first += batch[r];
    threads.emplace_back([&, r, begin, end]() {
      cudaSetDevice(r);
      const std::vector<float> x(xh.begin() + begin, xh.begin() + end), dy(dyh.begin() + begin, dyh.begin() + end);
      Buffers mine(Shape{batch[r], c, h, w, channels_last}, r, x, dy, wh, bh);
      got[r] = run_sync(mine, comms[r], &status[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  first = 0;
  std::vector<double> dw_sum(c, 0.0), db_sum(c, 0.0);
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE(testing::Message() << "rank " << r << " of batch " << batch[r]);
    ASSERT_TRUE(status[r].is_ok()) << status[r].message();
    EXPECT_EQ(0, std::memcmp(got[r].mean.data(), got[0].mean.data(), c * sizeof(float))) << "save_mean bits";
    EXPECT_EQ(0, std::memcmp(got[r].invstd.data(), got[0].invstd.data(), c * sizeof(float))) << "save_invstd bits";
    EXPECT_EQ(0, std::memcmp(got[r].running_var.data(), got[0].running_var.data(), c * sizeof(float)))
        << "running_var bits";
    expect_close(got[r].mean, want.mean, "save_mean");
    expect_close(got[r].invstd, want.invstd, "save_invstd");
    expect_close(got[r].running_mean, want.running_mean, "running_mean");
    expect_close(got[r].running_var, want.running_var, "running_var");
    const auto slice = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + first * sample, v.begin() + (first + batch[r]) * sample);
    };
    expect_close(got[r].y, slice(want.y), "y");
    expect_close(got[r].dx, slice(want.dx), "dx");
    first += batch[r];
    for (int64_t ch = 0; ch < c; ++ch) dw_sum[ch] += got[r].dweight[ch], db_sum[ch] += got[r].dbias[ch];
  }
  // Each rank's dweight / dbias are its own batch's: together the whole batch's.
  expect_close(std::vector<float>(dw_sum.begin(), dw_sum.end()), want.dweight, "sum of dweight", 10.0);
  expect_close(std::vector<float>(db_sum.begin(), db_sum.end()), want.dbias, "sum of dbias", 10.0);
}

TEST_F(BatchNormNcclGpu, RanksMatchConcatenatedBatch) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "one CUDA device on this machine: the multi-rank NCCL test needs two or more";
  const int ranks = std::min(devices, 8);
  std::vector<int64_t> equal(ranks, 4), unequal(ranks);
  for (int r = 0; r < ranks; ++r) unequal[r] = r == 1 ? 0 : 1 + 2 * r;  // rank 1 holds nothing
  for (const bool last : {false, true}) {
    check_ranks(equal, 32, 9, 9, last);
    check_ranks(unequal, 32, 9, 9, last);
    check_ranks(unequal, 5, 3, 7, last);
  }
}

}  // namespace
}  // namespace reducekit
