// SPDX-License-Identifier: Apache-2.0
// Rows at any alignment: the shifted vector loads and stores (vector_io.cuh) copy every byte of
// a vector and nothing else, and every row-wise op gives the same bits for a row whatever its
// start address, row stride or row length residue (the thread-to-element layout depends on the
// length alone). Buffers are allocated to the exact span of their rows, so a read past a row
// would be an out-of-bounds access for compute-sanitizer's memcheck.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/vector_io.cuh"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/norm.hpp"
#include "reducekit/reduce.hpp"
#include "reducekit/softmax.hpp"

namespace reducekit {
namespace {

using namespace testing_util;

// Thread v copies vector v of `src` (len elements) to `dst` when the vector is whole.
template <typename T>
__global__ void copy_vectors_kernel(const T* src, T* dst, int64_t len) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t e0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (e0 + VEC > len) return;
  kernels::store_vector16<sizeof(T)>(dst + e0, kernels::load_vector16<T, VEC>(src, e0, len));
}

// Every source and destination shift, and lengths of every residue mod VEC around one, two and
// many vectors: the whole vectors arrive bit for bit, and nothing else of the destination changes.
template <typename T> void check_copy_vectors() {
  constexpr int VEC = 16 / sizeof(T);
  SCOPED_TRACE(testing::Message() << "element bytes " << sizeof(T));
  for (int64_t len : {int64_t(VEC), int64_t(VEC + 1), int64_t(2 * VEC - 1), int64_t(2 * VEC), int64_t(2 * VEC + 3),
                      int64_t(3 * VEC), int64_t(257), int64_t(1000), int64_t(1003), int64_t(4096 + VEC - 1)}) {
    for (int src_shift = 0; src_shift < VEC; ++src_shift) {
      for (int dst_shift : {0, 1, VEC / 2, VEC - 1}) {
        SCOPED_TRACE(testing::Message() << "len " << len << " src shift " << src_shift << " dst shift " << dst_shift);
        std::vector<T> src(src_shift + len), dst(dst_shift + len + VEC);
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(0x9E3779B97F4A7C15ull * (i + 1) >> 17);
        for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<T>(~i);
        DeviceBuffer dsrc(src), ddst(dst);
        ASSERT_NE(dsrc.get(), nullptr);
        ASSERT_NE(ddst.get(), nullptr);
        const int64_t vectors = len / VEC;
        copy_vectors_kernel<T><<<static_cast<unsigned>((vectors + 127) / 128), 128>>>(
            static_cast<const T*>(dsrc.get()) + src_shift, static_cast<T*>(ddst.get()) + dst_shift, len);
        REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
        std::vector<T> got(dst.size());
        REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), ddst.get(), got.size() * sizeof(T), cudaMemcpyDeviceToHost));
        std::vector<T> want = dst;
        for (int64_t e = 0; e < vectors * VEC; ++e) want[dst_shift + e] = src[src_shift + e];
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0);
      }
    }
  }
}

TEST(VectorIo, ShiftedVectorsCopyExactly) {
  REDUCEKIT_REQUIRE_GPU();
  check_copy_vectors<uint16_t>();
  check_copy_vectors<uint32_t>();
  check_copy_vectors<uint64_t>();
}

// Thread v loads vector v of two rows at once (load_vectors16: each row at its own shift) and
// writes them to dst and dst + len.
template <typename T>
__global__ void copy_vector_pairs_kernel(const T* first, const T* second, T* dst, int64_t len) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t e0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (e0 + VEC > len) return;
  const T* const rows[2] = {first, second};
  const int64_t at[2] = {e0, e0};
  kernels::Bytes16 b[2];
  kernels::load_vectors16<T, VEC>(rows, at, len, b);
  kernels::store_vector16<sizeof(T)>(dst + e0, b[0]);
  kernels::store_vector16<sizeof(T)>(dst + len + e0, b[1]);
}

// Two rows of the same values at every pair of shifts: both rows' whole vectors arrive bit for bit.
template <typename T> void check_copy_vector_pairs() {
  constexpr int VEC = 16 / sizeof(T);
  SCOPED_TRACE(testing::Message() << "element bytes " << sizeof(T));
  for (int64_t len : {int64_t(VEC), int64_t(2 * VEC + 3), int64_t(1003)}) {
    for (int first_shift = 0; first_shift < VEC; ++first_shift) {
      for (int second_shift = 0; second_shift < VEC; ++second_shift) {
        SCOPED_TRACE(testing::Message() << "len " << len << " shifts " << first_shift << "/" << second_shift);
        std::vector<T> values(len), a(first_shift + len), b(second_shift + len);
        for (int64_t i = 0; i < len; ++i) values[i] = static_cast<T>(0x9E3779B97F4A7C15ull * (i + 3) >> 19);
        std::copy(values.begin(), values.end(), a.begin() + first_shift);
        std::copy(values.begin(), values.end(), b.begin() + second_shift);
        DeviceBuffer da(a), db(b), dd(2 * len * sizeof(T));
        ASSERT_TRUE(da.get() && db.get() && dd.get());
        REDUCEKIT_CUDA_OK(cudaMemset(dd.get(), 0, 2 * len * sizeof(T)));
        const int64_t vectors = len / VEC;
        copy_vector_pairs_kernel<T><<<static_cast<unsigned>((vectors + 127) / 128), 128>>>(
            static_cast<const T*>(da.get()) + first_shift, static_cast<const T*>(db.get()) + second_shift,
            static_cast<T*>(dd.get()), len);
        REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
        std::vector<T> got(2 * len);
        REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), dd.get(), got.size() * sizeof(T), cudaMemcpyDeviceToHost));
        for (int64_t e = 0; e < vectors * VEC; ++e) {
          ASSERT_EQ(got[e], values[e]) << "first row, element " << e;
          ASSERT_EQ(got[len + e], values[e]) << "second row, element " << e;
        }
      }
    }
  }
}

TEST(VectorIo, ShiftedVectorPairsLoadExactly) {
  REDUCEKIT_REQUIRE_GPU();
  check_copy_vector_pairs<uint16_t>();
  check_copy_vector_pairs<uint32_t>();
  check_copy_vector_pairs<uint64_t>();
}

// Warp w stores vectors 32 w .. 32 w + 31 of an aligned source at dst (store_warp_vector16: whole
// granules from neighbouring lanes' vectors, the warp's ends as pieces).
template <typename T> __global__ void warp_store_vectors_kernel(const T* src, T* dst) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t e0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  kernels::store_warp_vector16<sizeof(T)>(dst + e0, kernels::load_aligned16(src + e0));
}

// Every destination shift, one warp and several: the warps' vectors arrive bit for bit, and no
// byte around them changes (the pieces at each warp's ends stay inside its vectors).
template <typename T> void check_warp_stores(int dst_shift) {
  constexpr int VEC = 16 / sizeof(T);
  SCOPED_TRACE(testing::Message() << "element bytes " << sizeof(T) << " dst shift " << dst_shift);
  for (int warps : {1, 3, 8}) {
    const int64_t len = int64_t(warps) * 32 * VEC;
    std::vector<T> src(len), dst(dst_shift + len + VEC);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(0x9E3779B97F4A7C15ull * (i + 5) >> 13);
    for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<T>(~i);
    DeviceBuffer dsrc(src), ddst(dst);
    ASSERT_NE(dsrc.get(), nullptr);
    ASSERT_NE(ddst.get(), nullptr);
    warp_store_vectors_kernel<T><<<static_cast<unsigned>(warps), 32>>>(
        static_cast<const T*>(dsrc.get()), static_cast<T*>(ddst.get()) + dst_shift);
    REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<T> got(dst.size());
    REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), ddst.get(), got.size() * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<T> want = dst;
    std::copy(src.begin(), src.end(), want.begin() + dst_shift);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0) << warps << " warps";
  }
}

TEST(VectorIo, WarpStoresWriteExactly) {
  REDUCEKIT_REQUIRE_GPU();
  for (int shift = 0; shift < 8; ++shift) check_warp_stores<uint16_t>(shift);
  for (int shift = 0; shift < 4; ++shift) check_warp_stores<uint32_t>(shift);
}

// Lane l of each `width`-lane group holds vector v of a shifted source (v = the thread's index):
// it loads only the floor granule under v, lanes 0-3 a word each of the granule past the group,
// and shared_granule_vector assembles v from its neighbour's granule (the source's shift a
// constant by with_shift16, as the row kernels take it); v goes to dst aligned.
template <typename T> __global__ void shared_granule_vectors_kernel(const T* src, T* dst, int width) {
  constexpr int VEC = 16 / sizeof(T);
  const int v = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % width;
  const int shift = kernels::misalignment16(src);
  const char* const floor = reinterpret_cast<const char*>(src) - shift;
  const kernels::Bytes16 lo = kernels::load_aligned16(floor + int64_t(v) * 16);
  const int past_vector = v - lane + width;
  const uint32_t past = lane < 4 ? reinterpret_cast<const uint32_t*>(floor + int64_t(past_vector) * 16)[lane] : 0u;
  kernels::Bytes16 b{};
  kernels::with_shift16<sizeof(T)>(shift, [&](auto s) {
    b = kernels::shared_granule_vector<decltype(s)::value>(lo, past, lane, width);
  });
  kernels::store_aligned16(dst + int64_t(v) * VEC, b);
}

// Every source shift, groups of a whole warp and of 8 lanes: each vector arrives bit for bit
// (the source holds a granule past its last group, as a row does past a group that is not its
// last).
template <typename T> void check_shared_granule_vectors() {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int kVectors = 3 * 128;
  for (int width : {32, 8}) {
    for (int shift = 0; shift < VEC; ++shift) {
      SCOPED_TRACE(testing::Message() << "element bytes " << sizeof(T) << " shift " << shift << " width " << width);
      std::vector<T> src(shift + (kVectors + 2) * VEC);
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(0x9E3779B97F4A7C15ull * (i + 7) >> 15);
      DeviceBuffer dsrc(src), ddst(std::size_t(kVectors) * 16);
      ASSERT_TRUE(dsrc.get() && ddst.get());
      REDUCEKIT_CUDA_OK(cudaMemset(ddst.get(), 0xff, std::size_t(kVectors) * 16));
      shared_granule_vectors_kernel<T><<<kVectors / 128, 128>>>(static_cast<const T*>(dsrc.get()) + shift,
                                                                static_cast<T*>(ddst.get()), width);
      REDUCEKIT_CUDA_OK(cudaDeviceSynchronize());
      std::vector<T> got(std::size_t(kVectors) * VEC);
      REDUCEKIT_CUDA_OK(cudaMemcpy(got.data(), ddst.get(), got.size() * sizeof(T), cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got.data(), src.data() + shift, got.size() * sizeof(T)), 0);
    }
  }
}

TEST(VectorIo, SharedGranuleVectorsLoadExactly) {
  REDUCEKIT_REQUIRE_GPU();
  check_shared_granule_vectors<uint16_t>();
  check_shared_granule_vectors<uint32_t>();
  check_shared_granule_vectors<uint64_t>();
}

// ---- row-wise ops: the same bits at every alignment -------------------------------------------

enum class RowOp {
  kSoftmax, kLogSoftmax, kSoftmaxBackward, kLayerNorm, kRmsNorm, kAddLayerNorm, kSumRows, kVarColumns, kSumColumns
};

const char* name_of(RowOp op) {
  switch (op) {
    case RowOp::kSoftmax: return "softmax";
    case RowOp::kLogSoftmax: return "log_softmax";
    case RowOp::kSoftmaxBackward: return "softmax_backward";
    case RowOp::kLayerNorm: return "layer_norm";
    case RowOp::kRmsNorm: return "rms_norm";
    case RowOp::kAddLayerNorm: return "add_layer_norm";
    case RowOp::kSumRows: return "sum over rows";
    case RowOp::kVarColumns: return "var over columns";
    case RowOp::kSumColumns: return "sum over columns";
  }
  return "?";
}

// Where the rows of the op's inputs and outputs lie: row r of every array at element
// in_offset / out_offset + r * stride of a buffer of exactly the rows' span.
struct Placement {
  int64_t stride_pad, in_offset, out_offset;
};

template <typename T> class RowBuffers {
 public:
  RowBuffers(int64_t rows, int64_t cols, const Placement& p, int64_t offset)
      : layout_{rows, cols, cols + p.stride_pad, offset}, buffer_(layout_.span() * sizeof(T)) {}
  TensorView view() const { return row_view(buffer_.get(), dtype_of<T>(), layout_); }
  void fill(const std::vector<double>& dense) {
    std::vector<T> image(layout_.span(), from_double<T>(kPoison));
    for (int64_t r = 0; r < layout_.rows; ++r)
      for (int64_t c = 0; c < layout_.cols; ++c)
        image[layout_.offset + r * layout_.stride + c] = from_double<T>(dense[r * layout_.cols + c]);
    EXPECT_EQ(cudaMemcpy(buffer_.get(), image.data(), image.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // The rows, densely, as raw bits.
  std::vector<T> rows() const {
    std::vector<T> image(layout_.span());
    EXPECT_EQ(cudaMemcpy(image.data(), buffer_.get(), image.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<T> dense(layout_.rows * layout_.cols);
    for (int64_t r = 0; r < layout_.rows; ++r)
      std::memcpy(&dense[r * layout_.cols], &image[layout_.offset + r * layout_.stride], layout_.cols * sizeof(T));
    return dense;
  }

 private:
  static constexpr double kPoison = std::numeric_limits<double>::quiet_NaN();
  RowLayout layout_;
  DeviceBuffer buffer_;
};

template <typename A> std::vector<A> cast_vector(const std::vector<double>& v) {
  std::vector<A> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_double<A>(v[i]);
  return out;
}

// One call of `op` on rows x cols values placed as `p`; its outputs' bits, row by row.
template <typename T>
std::vector<std::vector<T>> run_placed(RowOp op, int64_t rows, int64_t cols, const Placement& p) {
  const std::vector<double> a = make_values(rows * cols, "randn", 71), b = make_values(rows * cols, "randn", 72),
                            w = make_values(cols, "randn", 73);
  RowBuffers<T> x(rows, cols, p, p.in_offset), x2(rows, cols, p, p.in_offset), y(rows, cols, p, p.out_offset),
      y2(rows, cols, p, p.out_offset);
  x.fill(a);
  x2.fill(op == RowOp::kSoftmaxBackward ? std::vector<double>(a.size(), 0.5) : b);
  y.fill(std::vector<double>(a.size(), std::numeric_limits<double>::quiet_NaN()));
  y2.fill(std::vector<double>(a.size(), std::numeric_limits<double>::quiet_NaN()));
  DeviceBuffer weight(cast_vector<T>(w)), bias(cast_vector<T>(b));
  TensorView wv, bv;
  wv.data = weight.get(), wv.dtype = dtype_of<T>(), wv.rank = 1, wv.sizes[0] = cols, wv.strides[0] = 1, wv.device = 0;
  bv = wv;
  bv.data = bias.get();
  const NormShape shape = NormShape::of({cols});
  Status s = Status::ok();
  std::vector<std::vector<T>> out;
  switch (op) {
    case RowOp::kSoftmax: s = softmax(x.view(), y.view(), -1, nullptr); break;
    case RowOp::kLogSoftmax: s = log_softmax(x.view(), y.view(), -1, nullptr); break;
    case RowOp::kSoftmaxBackward: s = softmax_backward(x2.view(), x.view(), y.view(), -1, nullptr); break;
    case RowOp::kLayerNorm: s = layer_norm(x.view(), shape, &wv, &bv, 1e-5, y.view(), nullptr, nullptr, nullptr); break;
    case RowOp::kRmsNorm: s = rms_norm(x.view(), shape, &wv, 1e-6, y.view(), nullptr, nullptr); break;
    case RowOp::kAddLayerNorm:
      s = add_layer_norm(x.view(), x2.view(), shape, &wv, &bv, 1e-5, y.view(), y2.view(), nullptr, nullptr, nullptr);
      break;
    case RowOp::kSumRows:
    case RowOp::kVarColumns:
    case RowOp::kSumColumns: {
      const bool columns = op != RowOp::kSumRows;
      const int64_t n = columns ? cols : rows;
      DeviceBuffer result(n * sizeof(T));
      TensorView rv;
      rv.data = result.get(), rv.dtype = dtype_of<T>(), rv.rank = 1, rv.sizes[0] = n, rv.strides[0] = 1, rv.device = 0;
      ReduceRequirements req;
      const int64_t dim = columns ? 0 : 1;
      const DimList dims = DimList::of(&dim, 1);
      const bool variance = op == RowOp::kVarColumns;
      s = reduce_requirements(variance ? ReduceOp::kVar : ReduceOp::kSum, x.view(), dims, false, &req);
      EXPECT_TRUE(s.is_ok()) << s.message();
      EXPECT_FALSE(req.needs_copy) << "the rows should be read in place";
      DeviceBuffer ws(req.workspace_bytes);
      if (req.workspace_zeroed_bytes > 0) EXPECT_EQ(cudaMemset(ws.get(), 0, req.workspace_zeroed_bytes), cudaSuccess);
      const Workspace wsv{ws.get(), req.workspace_bytes};
      s = variance ? var(x.view(), dims, 1.0, false, rv, wsv, nullptr) : sum(x.view(), dims, false, rv, wsv, nullptr);
      EXPECT_TRUE(s.is_ok()) << s.message();
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<T> r(n);
      EXPECT_EQ(cudaMemcpy(r.data(), result.get(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
      return {r};
    }
  }
  EXPECT_TRUE(s.is_ok()) << name_of(op) << ": " << s.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.push_back(y.rows());
  if (op == RowOp::kAddLayerNorm) out.push_back(y2.rows());
  return out;
}

// `got` has the bits of `want`, output by output. Outputs start as NaN and the inputs are finite:
// a call that wrote nothing would otherwise compare equal to another that wrote nothing, so the
// reference must be finite throughout.
template <typename T>
void expect_same_bits(const std::vector<std::vector<T>>& got, const std::vector<std::vector<T>>& want) {
  for (const auto& o : want)
    ASSERT_TRUE(std::all_of(o.begin(), o.end(), [](T v) { return std::isfinite(to_double(v)); }))
        << "the reference run left an output unwritten or not finite";
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t o = 0; o < got.size(); ++o)
    EXPECT_TRUE(same_bits(got[o], want[o])) << "output " << o;
}

// Row lengths of every residue mod 8, over the engine's paths (warp rows, one-CTA rows, 16-bit
// ring rows, re-read rows, clusters) and the reduce engine's row and column kernels.
template <typename T> void check_same_bits_at_every_alignment(RowOp op, std::initializer_list<int64_t> lengths) {
  for (int64_t cols : lengths) {
    // Column sums past one 64-row step and a partial one: the 8-lanes-down layout, whose inside
    // lanes load each row's two granules unconditionally.
    const int64_t rows = op == RowOp::kSumColumns ? 133 : cols > 40000 ? 3 : 9;
    SCOPED_TRACE(testing::Message() << name_of(op) << " " << dtype_name(dtype_of<T>()) << " rows=" << rows
                                    << " cols=" << cols);
    const auto want = run_placed<T>(op, rows, cols, {(8 - cols % 8) % 8, 0, 0});  // every row aligned
    for (const Placement& p : {Placement{0, 1, 1}, Placement{0, 3, 6}, Placement{0, 7, 0}, Placement{1, 0, 5},
                               Placement{3, 2, 2}, Placement{5, 5, 4}, Placement{8, 4, 4}}) {
      SCOPED_TRACE(testing::Message() << "stride cols+" << p.stride_pad << " offsets in " << p.in_offset << " out "
                                      << p.out_offset);
      expect_same_bits(run_placed<T>(op, rows, cols, p), want);
    }
  }
}

TEST(AlignmentGpu, RowOpsGiveTheSameBitsAtEveryOffsetAndStride) {
  REDUCEKIT_REQUIRE_GPU();
  for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax, RowOp::kSoftmaxBackward, RowOp::kLayerNorm, RowOp::kRmsNorm,
                   RowOp::kAddLayerNorm, RowOp::kSumRows, RowOp::kVarColumns, RowOp::kSumColumns}) {
    check_same_bits_at_every_alignment<__nv_bfloat16>(op, {5, 62, 259, 1003, 2044, 4098, 12807, 33001, 50257});
    check_same_bits_at_every_alignment<float>(op, {7, 61, 1002, 4100, 8195, 50257});
  }
  check_same_bits_at_every_alignment<__half>(RowOp::kSoftmax, {1001, 40009, 131073});
  check_same_bits_at_every_alignment<__nv_bfloat16>(RowOp::kLogSoftmax, {20001, 151937, 256003});  // staged
  check_same_bits_at_every_alignment<__nv_bfloat16>(RowOp::kRmsNorm, {65537, 131073});  // staged clusters
  check_same_bits_at_every_alignment<float>(RowOp::kLogSoftmax, {20483, 128257});  // float32 staged
  check_same_bits_at_every_alignment<float>(RowOp::kSoftmax, {11011, 16001});  // float32 ragged, staged on one CTA
  check_same_bits_at_every_alignment<float>(RowOp::kSoftmax, {3001, 32001});   // float32 ragged, not staged
  // float32 one-CTA rows of 32 values a thread: shifted, the block kernel capped at 72 registers
  for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax}) check_same_bits_at_every_alignment<float>(op, {11008, 14336});
  check_same_bits_at_every_alignment<double>(RowOp::kLayerNorm, {3, 1001, 4099});
}

// Re-read rows park their first tiles in shared memory by bulk copies (row_stream.cuh); the
// tiles, thread layout and combine order are those of the unparked rows, so both give the same
// bits at every alignment. Lengths of 13 and 65 tiles (all but the last parked; the stash budget
// holds 13, the rest read again through L2), one or two inputs, with and without per-column
// parameters. Both sides set the stash explicitly (the norm forwards park none by default).
template <typename T> void check_parked_like_unparked(RowOp op, std::initializer_list<int64_t> lengths) {
  for (int64_t cols : lengths) {
    const int64_t rows = cols > 100000 ? 40 : 150;
    SCOPED_TRACE(testing::Message() << name_of(op) << " " << dtype_name(dtype_of<T>()) << " rows=" << rows
                                    << " cols=" << cols);
    for (const Placement& p : {Placement{(8 - cols % 8) % 8, 0, 0}, Placement{1, 3, 6}, Placement{0, 5, 2}}) {
      SCOPED_TRACE(testing::Message() << "stride cols+" << p.stride_pad << " offsets in " << p.in_offset << " out "
                                      << p.out_offset);
      std::vector<std::vector<T>> want, got;
      {
        const ScopedTuning unparked("reread_stash_bytes", 0);
        want = run_placed<T>(op, rows, cols, p);
      }
      {
        const ScopedTuning parked("reread_stash_bytes", kRereadStashBytes);
        got = run_placed<T>(op, rows, cols, p);
      }
      expect_same_bits(got, want);
    }
  }
}

TEST(AlignmentGpu, ParkedRereadRowsGiveTheUnparkedBits) {
  REDUCEKIT_REQUIRE_GPU();
  for (RowOp op : {RowOp::kSoftmax, RowOp::kSoftmaxBackward, RowOp::kLayerNorm, RowOp::kRmsNorm, RowOp::kAddLayerNorm})
    check_parked_like_unparked<__nv_bfloat16>(op, {50257});
  check_parked_like_unparked<__nv_bfloat16>(RowOp::kSoftmax, {262147});
  check_parked_like_unparked<float>(RowOp::kLayerNorm, {50257});
}

}  // namespace
}  // namespace reducekit
