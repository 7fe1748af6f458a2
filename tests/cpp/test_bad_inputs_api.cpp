// SPDX-License-Identifier: Apache-2.0
// The bad-input matrix: every public entry point, handed an argument it cannot accept, returns a
// failed Status whose code says what kind of failure it is and whose message names the argument;
// where the input is valid after all (empty tensors, rank 0), the call succeeds with the right
// answer. Each case is a row of a table: a well-formed call with one argument spoiled.
//
// Each case runs in a child process (a death test, re-executing this binary), so a crash or a
// CUDA fault fails that one case instead of ending the suite. Three groups:
//   BadInputHost      rejected before the library asks the CUDA runtime anything (rank, dtype,
//                     host memory, null out-parameters, the norm backward workspace query):
//                     runs, and must pass, on machines without a GPU.
//   BadInputNoDevice  well-formed calls on a machine without a usable CUDA device: a kCudaError
//                     Status naming the first tensor, not a crash. Skipped where a GPU is present.
//   BadInputGpu       rejections that come after the current-device query, on cudaMalloc'd
//                     memory, plus the valid-result cases. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "reducekit/reducekit.hpp"

namespace reducekit {
namespace {

using Sizes = std::initializer_list<int64_t>;

constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16, kF64 = DType::kFloat64, kI64 = DType::kInt64;
constexpr DType kNoSuchDType = static_cast<DType>(42);  // an integer cast to DType that names no dtype
constexpr StatusCode kOk = StatusCode::kOk, kInvalid = StatusCode::kInvalidArgument,
                     kUnsupported = StatusCode::kUnsupported, kCudaError = StatusCode::kCudaError;

// ---- views ------------------------------------------------------------------------------------

// Device memory for one case: one allocation a child process (every case runs in its own),
// handed out in 256-byte aligned pieces as cudaMalloc aligns them, released when the child exits.
void* device_bytes(std::size_t bytes) {
  constexpr std::size_t kArenaBytes = std::size_t(64) << 20;
  static unsigned char* arena = nullptr;
  static std::size_t used = 0;
  if (arena == nullptr && cudaMalloc(reinterpret_cast<void**>(&arena), kArenaBytes) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of the case's %zu-byte arena failed\n", kArenaBytes);
    std::exit(2);
  }
  const std::size_t rounded = (bytes + 256) / 256 * 256;  // at least one spare byte: room for shifted views
  if (used + rounded > kArenaBytes) {
    std::fprintf(stderr, "the case needs more than the %zu-byte arena\n", kArenaBytes);
    std::exit(2);
  }
  void* p = arena + used;
  used += rounded;
  return p;
}

int current_device() {
  int device = -1;
  return cudaGetDevice(&device) == cudaSuccess ? device : -1;
}

using MakeView = TensorView (*)(DType, Sizes);

// A contiguous tensor in fresh device memory on the current device.
TensorView on_device(DType dtype, Sizes sizes) {
  TensorView v = make_contiguous_view(nullptr, dtype, sizes, current_device());
  v.data = device_bytes(static_cast<std::size_t>(v.numel()) * dtype_size(dtype));
  return v;
}

// A view of device 0 at an address nobody reads: the calls of the host and no-device groups
// must fail before touching memory (one that got further would fault in its child process).
TensorView unread(DType dtype, Sizes sizes) {
  return make_contiguous_view(reinterpret_cast<void*>(std::uintptr_t{1} << 20), dtype, sizes, 0);
}

TensorView in_host_memory(DType dtype, Sizes sizes) {
  alignas(16) static unsigned char buffer[4096];
  return make_contiguous_view(buffer, dtype, sizes, kHostDevice);
}

TensorView with_rank(TensorView v, int rank) {
  v.rank = rank;
  return v;
}
TensorView with_dtype(TensorView v, DType dtype) {
  v.dtype = dtype;
  return v;
}
TensorView with_data(TensorView v, void* data) {
  v.data = data;
  return v;
}
// v's data `bytes` further on: a pointer between two of its elements when bytes is not a multiple.
TensorView moved_by(TensorView v, std::size_t bytes) {
  v.data = static_cast<unsigned char*>(v.data) + bytes;
  return v;
}
TensorView with_device(TensorView v, int device) {
  v.device = device;
  return v;
}
TensorView with_sizes(TensorView v, Sizes sizes) {
  int d = 0;
  for (int64_t s : sizes) v.sizes[d++] = s;
  return v;
}
TensorView with_strides(TensorView v, Sizes strides) {
  int d = 0;
  for (int64_t s : strides) v.strides[d++] = s;
  return v;
}
// The same view moved `elements` elements on: overlapping the original without being it.
TensorView shifted(TensorView v, int64_t elements) {
  v.data = static_cast<unsigned char*>(v.data) + elements * static_cast<int64_t>(dtype_size(v.dtype));
  return v;
}
// Another view of `of`'s memory (an alias).
TensorView alias_of(const TensorView& of, DType dtype, Sizes sizes) {
  return make_contiguous_view(of.data, dtype, sizes, of.device);
}

Workspace device_workspace(std::size_t bytes, std::size_t offset = 0) {
  auto* base = static_cast<unsigned char*>(device_bytes(bytes + offset));
  if (cudaMemset(base, 0, bytes + offset) != cudaSuccess) std::exit(2);
  return Workspace{base + offset, bytes};
}

// A result a valid-input case checks: ok, or an error saying what differs.
Status expect(bool holds, const std::string& what) {
  return holds ? Status::ok() : Status::invalid_argument("wrong result: " + what);
}

template <typename T> std::vector<T> download(const TensorView& v) {
  std::vector<T> host(static_cast<std::size_t>(v.numel()));
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(host.data(), v.data, host.size() * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
    host.clear();
  return host;
}

bool all_nan(const std::vector<float>& values, std::size_t n) {
  if (values.size() != n) return false;
  for (float v : values)
    if (!std::isnan(v)) return false;
  return true;
}

// ---- well-formed calls, one argument of which a case spoils ----------------------------------
// Each holds valid tensors made by the maker it is given (on_device, or unread where nothing may
// be touched).

struct SoftmaxCall {
  TensorView x, y, dy, dx;
  int64_t dim = 1;
  explicit SoftmaxCall(MakeView m = on_device)
      : x(m(kF32, {4, 8})), y(m(kF32, {4, 8})), dy(m(kF32, {4, 8})), dx(m(kF32, {4, 8})) {}
  Status softmax() const { return reducekit::softmax(x, y, dim, nullptr); }
  Status softmax(const Workspace& ws) const { return reducekit::softmax(x, y, dim, ws, nullptr); }
  Status log_softmax() const { return reducekit::log_softmax(x, y, dim, nullptr); }
  Status log_softmax(const Workspace& ws) const { return reducekit::log_softmax(x, y, dim, ws, nullptr); }
  Status softmax_backward() const { return reducekit::softmax_backward(y, dy, dx, dim, nullptr); }
  Status log_softmax_backward() const { return reducekit::log_softmax_backward(y, dy, dx, dim, nullptr); }
  Status requirements() const {
    SoftmaxRequirements r;
    return softmax_requirements(x, dim, &r);
  }
};

// A [4, 8] float32 reduction over dim 1 by the named entry point of `op`.
struct ReduceCall {
  TensorView x, out, mean_out;
  std::vector<int64_t> dims{1};
  int dim_count = 1;
  bool all = false, keepdim = false;
  ReduceOp op = ReduceOp::kSum;
  Workspace ws;
  explicit ReduceCall(MakeView m = on_device) : x(m(kF32, {4, 8})), out(m(kF32, {4})), mean_out(m(kF32, {4})) {}
  DimList dim_list() const { return all ? DimList::every() : DimList::of(dims.data(), dim_count); }
  Status requirements(ReduceRequirements* r) const { return reduce_requirements(op, x, dim_list(), keepdim, r); }
  Status generic() const { return reduce(op, x, dim_list(), keepdim, 1.0, out, mean_out, ws, nullptr); }
  Status named() const {
    const DimList d = dim_list();
    switch (op) {
      case ReduceOp::kSum: return sum(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kMean: return mean(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kProd: return prod(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kAmax: return amax(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kAmin: return amin(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kArgmax: return argmax(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kArgmin: return argmin(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kLogsumexp: return logsumexp(x, d, keepdim, out, ws, nullptr);
      case ReduceOp::kVar: return var(x, d, 1.0, keepdim, out, ws, nullptr);
      case ReduceOp::kStd: return reducekit::std(x, d, 1.0, keepdim, out, ws, nullptr);
      case ReduceOp::kVarMean: return var_mean(x, d, 1.0, keepdim, out, mean_out, ws, nullptr);
      case ReduceOp::kStdMean: return std_mean(x, d, 1.0, keepdim, out, mean_out, ws, nullptr);
    }
    return generic();
  }
};
ReduceCall reduce_call(ReduceOp op) {
  ReduceCall c;
  c.op = op;
  if (op == ReduceOp::kArgmax || op == ReduceOp::kArgmin) c.out = on_device(kI64, {4});
  return c;
}

// layer_norm / rms_norm over the 8 columns of [4, 8] float32, forward and backward.
struct NormCall {
  TensorView x, residual, weight, bias, y, sum, mean, rstd, dy, dx, dweight, dbias;
  NormShape shape = NormShape::of({8});
  double eps = 1e-5;
  Workspace ws;
  explicit NormCall(MakeView m = on_device)
      : x(m(kF32, {4, 8})), residual(m(kF32, {4, 8})), weight(m(kF32, {8})), bias(m(kF32, {8})),
        y(m(kF32, {4, 8})), sum(m(kF32, {4, 8})), mean(m(kF32, {4})), rstd(m(kF32, {4})), dy(m(kF32, {4, 8})),
        dx(m(kF32, {4, 8})), dweight(m(kF32, {8})), dbias(m(kF32, {8})) {}
  Status layer_norm() const { return reducekit::layer_norm(x, shape, &weight, &bias, eps, y, &mean, &rstd, nullptr); }
  Status layer_norm(const Workspace& w) const {
    return reducekit::layer_norm(x, shape, &weight, &bias, eps, y, &mean, &rstd, w, nullptr);
  }
  Status rms_norm() const { return reducekit::rms_norm(x, shape, &weight, eps, y, &rstd, nullptr); }
  Status rms_norm(const Workspace& w) const {
    return reducekit::rms_norm(x, shape, &weight, eps, y, &rstd, w, nullptr);
  }
  Status add_layer_norm() const {
    return reducekit::add_layer_norm(x, residual, shape, &weight, &bias, eps, y, sum, &mean, &rstd, nullptr);
  }
  Status add_layer_norm(const Workspace& w) const {
    return reducekit::add_layer_norm(x, residual, shape, &weight, &bias, eps, y, sum, &mean, &rstd, w, nullptr);
  }
  Status add_rms_norm() const {
    return reducekit::add_rms_norm(x, residual, shape, &weight, eps, y, sum, &rstd, nullptr);
  }
  Status add_rms_norm(const Workspace& w) const {
    return reducekit::add_rms_norm(x, residual, shape, &weight, eps, y, sum, &rstd, w, nullptr);
  }
  Status layer_norm_backward() const {
    return reducekit::layer_norm_backward(dy, x, shape, mean, rstd, &weight, &dx, &dweight, &dbias, ws, nullptr);
  }
  Status rms_norm_backward() const {
    return reducekit::rms_norm_backward(dy, x, shape, rstd, &weight, &dx, &dweight, ws, nullptr);
  }
  Status requirements(bool layer, bool residual_add) const {
    NormRequirements r;
    return layer ? layer_norm_requirements(x, shape, residual_add, &r)
                 : rms_norm_requirements(x, shape, residual_add, &r);
  }
  Status backward_requirements() const {
    NormRequirements r;
    return norm_backward_requirements(x, shape, &r);
  }
};

// batch_norm of [N, C, L] = [2, 3, 4] float32, channels first.
struct BatchNormCall {
  TensorView x, y, weight, bias, running_mean, running_var, save_mean, save_invstd, dy, dx, dweight, dbias;
  bool with_running_var = true;
  BatchNormOptions options;
  Workspace ws;
  explicit BatchNormCall(MakeView m = on_device)
      : x(m(kF32, {2, 3, 4})), y(m(kF32, {2, 3, 4})), weight(m(kF32, {3})), bias(m(kF32, {3})),
        running_mean(m(kF32, {3})), running_var(m(kF32, {3})), save_mean(m(kF32, {3})), save_invstd(m(kF32, {3})),
        dy(m(kF32, {2, 3, 4})), dx(m(kF32, {2, 3, 4})), dweight(m(kF32, {3})), dbias(m(kF32, {3})) {}
  Status training() const {
    return batch_norm_training_forward(x, &weight, &bias, &running_mean, with_running_var ? &running_var : nullptr,
                                       options, y, save_mean, save_invstd, ws, nullptr);
  }
  Status inference() const {
    return batch_norm_inference_forward(x, &weight, &bias, running_mean, running_var, options.eps, y, &save_mean,
                                        &save_invstd, nullptr);
  }
  Status backward() const {
    return batch_norm_backward(dy, x, &weight, save_mean, save_invstd, true, &dx, &dweight, &dbias, ws, nullptr);
  }
  Status requirements(BatchNormRequirements* r) const { return batch_norm_requirements(x, r); }
  Status reads_once() const {
    bool once = false;
    return batch_norm_reads_once(x, false, &once);
  }
};

// cross-entropy of [4, 10] float32 logits (4 rows of 10 classes), class weights given.
struct CrossEntropyCall {
  TensorView logits, target, weight, loss, lse, grad_loss, dlogits;
  CrossEntropyOptions options;
  explicit CrossEntropyCall(MakeView m = on_device)
      : logits(m(kF32, {4, 10})), target(m(kI64, {4})), weight(m(kF32, {10})), loss(m(kF32, {4})),
        lse(m(kF32, {4})), grad_loss(m(kF32, {4})), dlogits(m(kF32, {4, 10})) {}
  Status forward() const { return cross_entropy_forward(logits, target, &weight, options, loss, lse, nullptr); }
  Status backward() const {
    return cross_entropy_backward(logits, target, &weight, lse, grad_loss, options, dlogits, nullptr);
  }
};

// ---- the table --------------------------------------------------------------------------------

struct Case {
  const char* name;              // the test's name: entry point, then what is wrong
  StatusCode code;               // the code the call must return
  const char* names;             // text its message must hold, naming the argument ("" for kOk)
  std::function<Status()> call;  // the spoiled call (run in the child process only)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

// Rejected before any CUDA runtime call: the same answer with or without a GPU.
std::vector<Case> host_cases() {
  return {
      // rank above kMaxRank, or negative
      {"softmax_x_rank_9", kInvalid, "x: rank 9",
       [] { SoftmaxCall c(unread); c.x = with_rank(c.x, 9); return c.softmax(); }},
      {"log_softmax_x_rank_negative", kInvalid, "x: rank -1",
       [] { SoftmaxCall c(unread); c.x = with_rank(c.x, -1); return c.log_softmax(); }},
      {"sum_x_rank_9", kInvalid, "x: rank 9",
       [] { ReduceCall c(unread); c.x = with_rank(c.x, 9); return c.named(); }},
      {"argmin_x_rank_9", kInvalid, "x: rank 9",
       [] { ReduceCall c(unread); c.op = ReduceOp::kArgmin; c.x = with_rank(c.x, 9); return c.named(); }},
      {"reduce_requirements_x_rank_negative", kInvalid, "x: rank -1",
       [] { ReduceCall c(unread); c.x = with_rank(c.x, -1); ReduceRequirements r; return c.requirements(&r); }},
      {"layer_norm_x_rank_9", kInvalid, "x: rank 9",
       [] { NormCall c(unread); c.x = with_rank(c.x, 9); return c.layer_norm(); }},
      {"add_rms_norm_x_rank_negative", kInvalid, "x: rank -2",
       [] { NormCall c(unread); c.x = with_rank(c.x, -2); return c.add_rms_norm(); }},
      {"batch_norm_training_x_rank_9", kInvalid, "x: rank 9",
       [] { BatchNormCall c(unread); c.x = with_rank(c.x, 9); return c.training(); }},
      {"cross_entropy_forward_logits_rank_9", kInvalid, "logits: rank 9",
       [] { CrossEntropyCall c(unread); c.logits = with_rank(c.logits, 9); return c.forward(); }},
      // integer tensors where floats are required
      {"softmax_backward_y_int64", kInvalid, "y: expected float32",
       [] { SoftmaxCall c(unread); c.y = with_dtype(c.y, kI64); return c.softmax_backward(); }},
      {"mean_x_int64", kInvalid, "x: expected float32",
       [] { ReduceCall c(unread); c.op = ReduceOp::kMean; c.x = with_dtype(c.x, kI64); return c.named(); }},
      {"rms_norm_x_int64", kInvalid, "x: expected float32",
       [] { NormCall c(unread); c.x = with_dtype(c.x, kI64); return c.rms_norm(); }},
      {"layer_norm_backward_x_int64", kInvalid, "x: expected float32",
       [] { NormCall c(unread); c.x = with_dtype(c.x, kI64); return c.layer_norm_backward(); }},
      {"batch_norm_inference_x_int64", kInvalid, "x: expected float32",
       [] { BatchNormCall c(unread); c.x = with_dtype(c.x, kI64); return c.inference(); }},
      {"cross_entropy_backward_logits_int64", kInvalid, "logits: expected float32",
       [] { CrossEntropyCall c(unread); c.logits = with_dtype(c.logits, kI64); return c.backward(); }},
      // a DType value outside the enum: dtype_size() is 0 for it, and the row planners divide by it
      {"softmax_x_no_such_dtype", kInvalid, "x: expected float32",
       [] { SoftmaxCall c(unread); c.x = with_dtype(c.x, kNoSuchDType); return c.softmax(); }},
      {"var_mean_x_no_such_dtype", kInvalid, "x: expected float32",
       [] { ReduceCall c(unread); c.op = ReduceOp::kVarMean; c.x = with_dtype(c.x, kNoSuchDType); return c.named(); }},
      {"cross_entropy_forward_logits_no_such_dtype", kInvalid, "logits: expected float32",
       [] { CrossEntropyCall c(unread); c.logits = with_dtype(c.logits, kNoSuchDType); return c.forward(); }},
      // a data pointer between two elements (kernels read whole elements and vectors of them)
      {"softmax_x_between_elements", kInvalid, "x: data pointer 0x100002 is not aligned to its float32 elements (4 bytes)",
       [] { SoftmaxCall c(unread); c.x = moved_by(c.x, 2); return c.softmax(); }},
      {"amax_x_between_elements", kInvalid, "x: data pointer",
       [] { ReduceCall c(unread); c.op = ReduceOp::kAmax; c.x = moved_by(c.x, 1); return c.named(); }},
      {"rms_norm_x_between_elements", kInvalid, "x: data pointer",
       [] { NormCall c(unread); c.x = moved_by(c.x, 3); return c.rms_norm(); }},
      {"cross_entropy_forward_logits_between_elements", kInvalid, "logits: data pointer",
       [] { CrossEntropyCall c(unread); c.logits = moved_by(c.logits, 2); return c.forward(); }},
      // host memory passed where a CUDA tensor is required
      {"log_softmax_backward_y_host_memory", kInvalid, "y: expected a CUDA tensor",
       [] { SoftmaxCall c(unread); c.y = in_host_memory(kF32, {4, 8}); return c.log_softmax_backward(); }},
      {"softmax_requirements_x_host_memory", kInvalid, "x: expected a CUDA tensor",
       [] { SoftmaxCall c(unread); c.x = in_host_memory(kF32, {4, 8}); return c.requirements(); }},
      {"argmax_x_host_memory", kInvalid, "x: expected a CUDA tensor",
       [] { ReduceCall c(unread); c.op = ReduceOp::kArgmax; c.x = in_host_memory(kF32, {4, 8}); return c.named(); }},
      {"add_layer_norm_x_host_memory", kInvalid, "x: expected a CUDA tensor",
       [] { NormCall c(unread); c.x = in_host_memory(kF32, {4, 8}); return c.add_layer_norm(); }},
      {"rms_norm_backward_x_host_memory", kInvalid, "x: expected a CUDA tensor",
       [] { NormCall c(unread); c.x = in_host_memory(kF32, {4, 8}); return c.rms_norm_backward(); }},
      {"batch_norm_backward_x_host_memory", kInvalid, "x: expected a CUDA tensor",
       [] { BatchNormCall c(unread); c.x = in_host_memory(kF32, {2, 3, 4}); return c.backward(); }},
      {"batch_norm_requirements_x_host_memory", kInvalid, "x: expected a CUDA tensor",
       [] {
         BatchNormCall c(unread);
         c.x = in_host_memory(kF32, {2, 3, 4});
         BatchNormRequirements r;
         return c.requirements(&r);
       }},
      {"cross_entropy_forward_logits_host_memory", kInvalid, "logits: expected a CUDA tensor",
       [] { CrossEntropyCall c(unread); c.logits = in_host_memory(kF32, {4, 10}); return c.forward(); }},
      // null out-parameters of the queries
      {"softmax_requirements_null", kInvalid, "requirements:",
       [] { return softmax_requirements(unread(kF32, {4, 8}), 1, nullptr); }},
      {"reduce_requirements_null", kInvalid, "requirements:",
       [] { return ReduceCall(unread).requirements(nullptr); }},
      {"layer_norm_requirements_null", kInvalid, "requirements:",
       [] { return layer_norm_requirements(unread(kF32, {4, 8}), NormShape::of({8}), false, nullptr); }},
      {"rms_norm_requirements_null", kInvalid, "requirements:",
       [] { return rms_norm_requirements(unread(kF32, {4, 8}), NormShape::of({8}), true, nullptr); }},
      {"norm_backward_requirements_null", kInvalid, "requirements:",
       [] { return norm_backward_requirements(unread(kF32, {4, 8}), NormShape::of({8}), nullptr); }},
      {"batch_norm_requirements_null", kInvalid, "req:",
       [] { return BatchNormCall(unread).requirements(nullptr); }},
      {"batch_norm_reads_once_null", kInvalid, "once:",
       [] { return batch_norm_reads_once(unread(kF32, {2, 3, 4}), true, nullptr); }},
      // an integer cast to ReduceOp that names no op
      {"reduce_no_such_op", kInvalid, "op: 42",
       [] { ReduceCall c(unread); c.op = static_cast<ReduceOp>(42); return c.generic(); }},
      {"reduce_requirements_no_such_op", kInvalid, "op: -1",
       [] { ReduceCall c(unread); c.op = static_cast<ReduceOp>(-1); ReduceRequirements r; return c.requirements(&r); }},
      // norm_backward_requirements checks its arguments itself (no device tensor check)
      {"norm_backward_requirements_x_rank_9", kInvalid, "x: rank 9",
       [] { NormCall c(unread); c.x = with_rank(c.x, 9); return c.backward_requirements(); }},
      {"norm_backward_requirements_x_negative_size", kInvalid, "x: negative size",
       [] { NormCall c(unread); c.x = with_sizes(c.x, {-2, 8}); return c.backward_requirements(); }},
      {"norm_backward_requirements_x_int64", kInvalid, "x: unsupported dtype",
       [] { NormCall c(unread); c.x = with_dtype(c.x, kI64); return c.backward_requirements(); }},
      {"norm_backward_requirements_x_no_such_dtype", kInvalid, "x: unsupported dtype",
       [] { NormCall c(unread); c.x = with_dtype(c.x, kNoSuchDType); return c.backward_requirements(); }},
      {"norm_backward_requirements_shape_mismatch", kInvalid, "normalized_shape: [6] does not match",
       [] { NormCall c(unread); c.shape = NormShape::of({6}); return c.backward_requirements(); }},
      {"norm_backward_requirements_shape_empty", kInvalid, "normalized_shape: expected 1 to 2",
       [] { NormCall c(unread); c.shape = NormShape::of({}); return c.backward_requirements(); }},
      {"norm_backward_requirements_shape_rank_9", kInvalid, "normalized_shape:",
       [] {
         NormCall c(unread);
         c.shape = NormShape::of({1, 1, 1, 1, 1, 1, 1, 4, 8});
         return c.backward_requirements();
       }},
      // valid: rows past the fused range need 2 x ceil(rows / 256) x cols float32 partial sums,
      // and no rows need nothing; both answered without asking the device
      {"norm_backward_requirements_long_rows", kOk, "",
       [] {
         NormRequirements r;
         r.workspace_zeroed_bytes = 1;
         REDUCEKIT_RETURN_IF_ERROR(
             norm_backward_requirements(unread(kF32, {4, 16384}), NormShape::of({16384}), &r));
         return expect(r.workspace_bytes == 2 * 16384 * 4 && r.workspace_zeroed_bytes == 0,
                       std::to_string(r.workspace_bytes) + " bytes, " + std::to_string(r.workspace_zeroed_bytes) +
                           " zeroed");
       }},
      {"norm_backward_requirements_no_rows", kOk, "",
       [] {
         NormRequirements r;
         r.workspace_bytes = 1;
         REDUCEKIT_RETURN_IF_ERROR(
             norm_backward_requirements(unread(kF16, {0, 3, 8}), NormShape::of({3, 8}), &r));
         return expect(r.workspace_bytes == 0, std::to_string(r.workspace_bytes) + " bytes");
       }},
  };
}

// Every entry point, well formed, where the CUDA runtime has no device: the first device tensor
// check reports it (norm_backward_requirements asks the occupancy query instead).
std::vector<Case> no_device_cases() {
  const char* no_x = "x: no usable CUDA device";
  const char* no_y = "y: no usable CUDA device";
  const char* no_logits = "logits: no usable CUDA device";
  return {
      {"softmax", kCudaError, no_x,
       [] { return SoftmaxCall(unread).softmax(); }},
      {"softmax_workspace", kCudaError, no_x,
       [] { return SoftmaxCall(unread).softmax(Workspace{}); }},
      {"log_softmax", kCudaError, no_x,
       [] { return SoftmaxCall(unread).log_softmax(); }},
      {"log_softmax_workspace", kCudaError, no_x,
       [] { return SoftmaxCall(unread).log_softmax(Workspace{}); }},
      {"softmax_backward", kCudaError, no_y,
       [] { return SoftmaxCall(unread).softmax_backward(); }},
      {"log_softmax_backward", kCudaError, no_y,
       [] { return SoftmaxCall(unread).log_softmax_backward(); }},
      {"softmax_requirements", kCudaError, no_x,
       [] { return SoftmaxCall(unread).requirements(); }},
      {"reduce", kCudaError, no_x,
       [] { return ReduceCall(unread).generic(); }},
      {"reduce_requirements", kCudaError, no_x,
       [] { ReduceRequirements r; return ReduceCall(unread).requirements(&r); }},
      {"sum", kCudaError, no_x,
       [] { return ReduceCall(unread).named(); }},
      {"std_mean", kCudaError, no_x,
       [] { ReduceCall c(unread); c.op = ReduceOp::kStdMean; return c.named(); }},
      {"layer_norm", kCudaError, no_x,
       [] { return NormCall(unread).layer_norm(); }},
      {"layer_norm_workspace", kCudaError, no_x,
       [] { return NormCall(unread).layer_norm(Workspace{}); }},
      {"rms_norm", kCudaError, no_x,
       [] { return NormCall(unread).rms_norm(); }},
      {"rms_norm_workspace", kCudaError, no_x,
       [] { return NormCall(unread).rms_norm(Workspace{}); }},
      {"add_layer_norm", kCudaError, no_x,
       [] { return NormCall(unread).add_layer_norm(); }},
      {"add_layer_norm_workspace", kCudaError, no_x,
       [] { return NormCall(unread).add_layer_norm(Workspace{}); }},
      {"add_rms_norm", kCudaError, no_x,
       [] { return NormCall(unread).add_rms_norm(); }},
      {"add_rms_norm_workspace", kCudaError, no_x,
       [] { return NormCall(unread).add_rms_norm(Workspace{}); }},
      {"layer_norm_requirements", kCudaError, no_x,
       [] { return NormCall(unread).requirements(true, false); }},
      {"rms_norm_requirements", kCudaError, no_x,
       [] { return NormCall(unread).requirements(false, true); }},
      {"layer_norm_backward", kCudaError, no_x,
       [] { return NormCall(unread).layer_norm_backward(); }},
      {"rms_norm_backward", kCudaError, no_x,
       [] { return NormCall(unread).rms_norm_backward(); }},
      {"norm_backward_requirements", kCudaError, "device query",
       [] { return NormCall(unread).backward_requirements(); }},
      {"batch_norm_training_forward", kCudaError, no_x,
       [] { return BatchNormCall(unread).training(); }},
      {"batch_norm_inference_forward", kCudaError, no_x,
       [] { return BatchNormCall(unread).inference(); }},
      {"batch_norm_backward", kCudaError, no_x,
       [] { return BatchNormCall(unread).backward(); }},
      {"batch_norm_requirements", kCudaError, no_x,
       [] { BatchNormRequirements r; return BatchNormCall(unread).requirements(&r); }},
      {"batch_norm_reads_once", kCudaError, no_x,
       [] { return BatchNormCall(unread).reads_once(); }},
      {"cross_entropy_forward", kCudaError, no_logits,
       [] { return CrossEntropyCall(unread).forward(); }},
      {"cross_entropy_backward", kCudaError, no_logits,
       [] { return CrossEntropyCall(unread).backward(); }},
  };
}

// Softmax rows long enough to split over a cooperative grid, whose workspace is therefore not
// empty; the length is searched because where splitting starts depends on the device.
Status softmax_with_spoiled_workspace(Workspace (*spoil)(const SoftmaxRequirements&)) {
  for (int64_t cols : {int64_t(1) << 21, int64_t(1) << 22, int64_t(1) << 23}) {
    SoftmaxCall c;
    c.x = on_device(kF16, {1, cols});
    c.y = c.x;  // in place: the row is never read, the workspace check fails first
    SoftmaxRequirements r;
    REDUCEKIT_RETURN_IF_ERROR(softmax_requirements(c.x, 1, &r));
    if (r.workspace_bytes > 0) return c.softmax(spoil(r));
  }
  return Status::unsupported("precondition: no row up to 2^23 elements needs a softmax workspace on this device");
}
Status layer_norm_with_spoiled_workspace(Workspace (*spoil)(const NormRequirements&)) {
  for (int64_t cols : {int64_t(1) << 20, int64_t(1) << 21, int64_t(1) << 22}) {
    NormCall c;
    c.x = on_device(kF16, {1, cols});
    c.y = c.x;
    c.shape = NormShape::of({cols});
    c.weight = on_device(kF16, {cols});
    c.bias = on_device(kF16, {cols});
    c.mean = on_device(kF32, {1});
    c.rstd = on_device(kF32, {1});
    NormRequirements r;
    REDUCEKIT_RETURN_IF_ERROR(layer_norm_requirements(c.x, c.shape, false, &r));
    if (r.workspace_bytes > 0) return c.layer_norm(spoil(r));
  }
  return Status::unsupported("precondition: no row up to 2^22 elements needs a layer_norm workspace on this device");
}
// A full reduction of 2^22 floats: several CTAs, so partials and completion tickets.
Status sum_all_with_spoiled_workspace(Workspace (*spoil)(const ReduceRequirements&)) {
  ReduceCall c;
  c.x = on_device(kF32, {int64_t(1) << 22});
  c.all = true;
  c.out = on_device(kF32, {});
  ReduceRequirements r;
  REDUCEKIT_RETURN_IF_ERROR(c.requirements(&r));
  if (r.workspace_bytes == 0 || r.workspace_zeroed_bytes == 0)
    return Status::unsupported("precondition: a full sum of 2^22 floats needs no tickets on this device");
  c.ws = spoil(r);
  return c.named();
}
// The backward workspace that dweight and dbias need, spoiled.
Status layer_norm_backward_with_spoiled_workspace(Workspace (*spoil)(std::size_t)) {
  NormCall c;
  NormRequirements r;
  REDUCEKIT_RETURN_IF_ERROR(norm_backward_requirements(c.x, c.shape, &r));
  c.ws = spoil(r.workspace_bytes);
  return c.layer_norm_backward();
}

std::vector<Case> gpu_cases() {
  const int64_t kTooLong = (int64_t(1) << 30) + 1;  // one past the longest row the row kernels take
  return {
      // ---- softmax family
      {"softmax_x_null_data", kInvalid, "x: null data pointer",
       [] { SoftmaxCall c; c.x = with_data(c.x, nullptr); return c.softmax(); }},
      {"softmax_x_negative_size", kInvalid, "x: negative size",
       [] { SoftmaxCall c; c.x = with_sizes(c.x, {-4, 8}); return c.softmax(); }},
      {"softmax_x_other_device", kInvalid, "x: on CUDA device",
       [] { SoftmaxCall c; c.x = with_device(c.x, c.x.device + 1); return c.softmax(); }},
      {"softmax_y_shape", kInvalid, "y: shape [4, 9] differs",
       [] { SoftmaxCall c; c.y = on_device(kF32, {4, 9}); return c.softmax(); }},
      {"log_softmax_y_dtype", kInvalid, "y: dtype float16 differs",
       [] { SoftmaxCall c; c.y = with_dtype(c.y, kF16); return c.log_softmax(); }},
      {"softmax_y_partial_overlap", kInvalid, "y: overlaps x",
       [] { SoftmaxCall c; c.y = shifted(c.x, 1); return c.softmax(); }},
      {"softmax_y_rows_overlap", kInvalid, "y: its rows overlap",
       [] { SoftmaxCall c; c.y = with_strides(c.y, {0, 1}); return c.softmax(); }},
      {"softmax_dim_out_of_range", kInvalid, "dim: 2 is out of range",
       [] { SoftmaxCall c; c.dim = 2; return c.softmax(); }},
      {"log_softmax_dim_negative_out_of_range", kInvalid, "dim: -3 is out of range",
       [] { SoftmaxCall c; c.dim = -3; return c.log_softmax(); }},
      {"softmax_requirements_dim_out_of_range", kInvalid, "dim: 5",
       [] { SoftmaxCall c; c.dim = 5; return c.requirements(); }},
      {"softmax_dim_not_innermost_strided", kUnsupported, "x: the dim must be innermost",
       [] { SoftmaxCall c; c.x = with_strides(c.x, {1, 4}); return c.softmax(); }},
      {"softmax_row_too_long", kUnsupported, "x: rows longer than",
       [kTooLong] { SoftmaxCall c; c.x = with_sizes(c.x, {1, kTooLong}); c.y = c.x; return c.softmax(); }},
      {"softmax_backward_dy_shape", kInvalid, "dy: shape [4, 7] differs from y's",
       [] { SoftmaxCall c; c.dy = on_device(kF32, {4, 7}); return c.softmax_backward(); }},
      {"log_softmax_backward_dx_partial_overlap", kInvalid, "dx: overlaps dy",
       [] { SoftmaxCall c; c.dx = shifted(c.dy, 1); return c.log_softmax_backward(); }},
      {"softmax_workspace_too_small", kInvalid, "workspace:",
       [] {
         return softmax_with_spoiled_workspace([](const SoftmaxRequirements& r) {
           Workspace w = device_workspace(r.workspace_bytes);
           w.bytes -= 16;
           return w;
         });
       }},
      {"softmax_workspace_misaligned", kInvalid, "workspace: bytes must be 16-byte aligned",
       [] {
         return softmax_with_spoiled_workspace([](const SoftmaxRequirements& r) {
           return device_workspace(r.workspace_bytes, 8);
         });
       }},
      // ---- reductions
      {"sum_dim_out_of_range", kInvalid, "dim: 2 is out of range",
       [] { ReduceCall c; c.dims = {2}; return c.named(); }},
      {"var_dim_repeated", kInvalid, "dim: 1 appears twice",
       [] { ReduceCall c = reduce_call(ReduceOp::kVar); c.dims = {1, -1}; c.dim_count = 2; return c.named(); }},
      {"prod_nine_dims", kInvalid, "dim: 9 dims given",
       [] { ReduceCall c = reduce_call(ReduceOp::kProd); c.dims.assign(9, 0); c.dim_count = 9; return c.named(); }},
      {"logsumexp_negative_dim_count", kInvalid, "dim: -1 dims given",
       [] { ReduceCall c = reduce_call(ReduceOp::kLogsumexp); c.dim_count = -1; return c.named(); }},
      {"mean_null_dim_list", kInvalid, "dim: null list",
       [] {
         ReduceCall c = reduce_call(ReduceOp::kMean);
         return mean(c.x, DimList::of(nullptr, 1), false, c.out, {}, nullptr);
       }},
      {"argmax_over_empty_dim", kInvalid, "dim: argmax over dim 1 of size 0",
       [] { ReduceCall c = reduce_call(ReduceOp::kArgmax); c.x = on_device(kF32, {4, 0}); return c.named(); }},
      {"amin_of_empty_tensor", kInvalid, "dim: amin over dim 0 of size 0",
       [] {
         ReduceCall c = reduce_call(ReduceOp::kAmin);
         c.x = on_device(kF32, {0, 4});
         c.all = true;
         c.out = on_device(kF32, {});
         return c.named();
       }},
      {"argmin_requirements_empty_dim", kInvalid, "dim: argmin",
       [] {
         ReduceCall c = reduce_call(ReduceOp::kArgmin);
         c.x = on_device(kF32, {4, 0});
         ReduceRequirements r;
         return c.requirements(&r);
       }},
      {"sum_numel_overflows_int64", kInvalid, "x: the number of elements overflows",
       [] {
         ReduceCall c;
         c.x = make_contiguous_view(c.x.data, kF32, {int64_t(1) << 40, int64_t(1) << 40}, c.x.device);
         c.dims = {0};
         c.out = on_device(kF32, {1});
         return c.named();
       }},
      {"std_negative_stride", kUnsupported, "x: stride -1 of dim 1",
       [] {
         ReduceCall c = reduce_call(ReduceOp::kStd);
         c.x = with_strides(shifted(c.x, 7), {8, -1});
         return c.named();
       }},
      {"sum_layout_needs_copy", kUnsupported, "x: sum cannot read this layout",
       [] { ReduceCall c; c.x = on_device(kF32, {2, 4, 3}); c.dims = {0, 2}; c.dim_count = 2; return c.named(); }},
      {"sum_out_shape", kInvalid, "out: expected shape [4], got [8]",
       [] { ReduceCall c; c.out = on_device(kF32, {8}); return c.named(); }},
      {"sum_keepdim_out_shape", kInvalid, "out: expected shape [4, 1], got [4]",
       [] { ReduceCall c; c.keepdim = true; return c.named(); }},
      {"argmin_keepdim_out_shape", kInvalid, "out: expected shape [4, 1], got [4]",
       [] { ReduceCall c = reduce_call(ReduceOp::kArgmin); c.keepdim = true; return c.named(); }},
      {"amax_out_dtype", kInvalid, "out: expected dtype float32, got float16",
       [] { ReduceCall c = reduce_call(ReduceOp::kAmax); c.out = with_dtype(c.out, kF16); return c.named(); }},
      {"argmax_out_float", kInvalid, "out: expected dtype int64",
       [] { ReduceCall c = reduce_call(ReduceOp::kArgmax); c.out = on_device(kF32, {4}); return c.named(); }},
      {"sum_out_no_such_dtype", kInvalid, "out: expected dtype float32",
       [] { ReduceCall c; c.out = with_dtype(c.out, kNoSuchDType); return c.named(); }},
      {"prod_out_null_data", kInvalid, "out: null data pointer",
       [] { ReduceCall c = reduce_call(ReduceOp::kProd); c.out = with_data(c.out, nullptr); return c.named(); }},
      {"argmax_out_between_elements", kInvalid, "out: data pointer",
       [] { ReduceCall c = reduce_call(ReduceOp::kArgmax); c.out = moved_by(c.out, 4); return c.named(); }},
      {"sum_out_not_contiguous", kInvalid, "out: must be contiguous",
       [] { ReduceCall c; c.out = with_strides(on_device(kF32, {8}), {2}); c.out.sizes[0] = 4; return c.named(); }},
      {"mean_out_overlaps_x", kInvalid, "out: overlaps x",
       [] { ReduceCall c = reduce_call(ReduceOp::kMean); c.out = alias_of(c.x, kF32, {4}); return c.named(); }},
      {"var_mean_mean_out_is_out", kInvalid, "mean_out: shares memory with out",
       [] { ReduceCall c = reduce_call(ReduceOp::kVarMean); c.mean_out = c.out; return c.named(); }},
      {"std_mean_mean_out_shape", kInvalid, "mean_out: expected shape",
       [] { ReduceCall c = reduce_call(ReduceOp::kStdMean); c.mean_out = on_device(kF32, {5}); return c.named(); }},
      {"sum_all_workspace_missing", kInvalid, "workspace:",
       [] { return sum_all_with_spoiled_workspace([](const ReduceRequirements&) { return Workspace{}; }); }},
      {"sum_all_workspace_too_small", kInvalid, "workspace:",
       [] {
         return sum_all_with_spoiled_workspace([](const ReduceRequirements& r) {
           Workspace w = device_workspace(r.workspace_bytes);
           w.bytes -= 1;
           return w;
         });
       }},
      {"sum_all_workspace_misaligned", kInvalid, "workspace: bytes must be 16-byte aligned",
       [] {
         return sum_all_with_spoiled_workspace([](const ReduceRequirements& r) {
           return device_workspace(r.workspace_bytes, 8);
         });
       }},
      {"sum_all_tickets_too_small", kInvalid, "ticket bytes needed",
       [] {
         return sum_all_with_spoiled_workspace([](const ReduceRequirements& r) {
           Workspace w = device_workspace(r.workspace_bytes);
           w.tickets = device_workspace(r.workspace_zeroed_bytes).data;
           w.ticket_bytes = r.workspace_zeroed_bytes - 1;
           return w;
         });
       }},
      // ---- layer_norm / rms_norm forward
      {"layer_norm_shape_mismatch", kInvalid, "normalized_shape: [6] does not match",
       [] { NormCall c; c.shape = NormShape::of({6}); return c.layer_norm(); }},
      {"rms_norm_shape_longer_than_x", kInvalid, "normalized_shape: expected 1 to 2 dims",
       [] { NormCall c; c.shape = NormShape::of({1, 4, 8}); return c.rms_norm(); }},
      {"layer_norm_shape_empty", kInvalid, "normalized_shape: expected 1 to 2 dims",
       [] { NormCall c; c.shape = NormShape::of({}); return c.layer_norm(); }},
      {"rms_norm_x_rank_0", kInvalid, "normalized_shape: expected 1 to 0 dims",
       [] { NormCall c; c.x = c.y = on_device(kF32, {}); c.shape = NormShape::of({1}); return c.rms_norm(); }},
      {"layer_norm_requirements_shape_mismatch", kInvalid, "normalized_shape:",
       [] { NormCall c; c.shape = NormShape::of({4}); return c.requirements(true, false); }},
      {"layer_norm_eps_negative", kInvalid, "eps:",
       [] { NormCall c; c.eps = -1.0; return c.layer_norm(); }},
      {"rms_norm_eps_nan", kInvalid, "eps:",
       [] { NormCall c; c.eps = std::nan(""); return c.rms_norm(); }},
      {"layer_norm_weight_shape", kInvalid, "weight: shape [7] does not match",
       [] { NormCall c; c.weight = on_device(kF32, {7}); return c.layer_norm(); }},
      {"rms_norm_weight_dtype", kInvalid, "weight: dtype float64 must be x's",
       [] { NormCall c; c.weight = on_device(kF64, {8}); return c.rms_norm(); }},
      {"layer_norm_weight_null_data", kInvalid, "weight: null data pointer",
       [] { NormCall c; c.weight = with_data(c.weight, nullptr); return c.layer_norm(); }},
      {"layer_norm_weight_between_elements", kInvalid, "weight: data pointer",
       [] { NormCall c; c.weight = moved_by(c.weight, 2); return c.layer_norm(); }},
      {"layer_norm_backward_dy_between_elements", kInvalid, "dy: data pointer",
       [] { NormCall c; c.dy = moved_by(c.dy, 2); return c.layer_norm_backward(); }},
      {"layer_norm_weight_not_contiguous", kUnsupported, "weight: must be contiguous",
       [] {
         NormCall c;
         c.weight = with_strides(on_device(kF32, {16}), {2});
         c.weight.sizes[0] = 8;
         return c.layer_norm();
       }},
      {"layer_norm_bias_dtype_differs_from_weight", kInvalid, "bias: dtype float16 differs from weight's float32",
       [] {
         NormCall c;
         c.x = on_device(kF16, {4, 8});
         c.y = on_device(kF16, {4, 8});
         c.bias = on_device(kF16, {8});  // each allowed for float16 x, but not together
         return c.layer_norm();
       }},
      {"layer_norm_mean_numel", kInvalid, "mean: has 3 elements, expected 4",
       [] { NormCall c; c.mean = on_device(kF32, {3}); return c.layer_norm(); }},
      {"rms_norm_rstd_dtype", kInvalid, "rstd: dtype float16 must be float32",
       [] {
         NormCall c;
         c.x = on_device(kF16, {4, 8});
         c.y = on_device(kF16, {4, 8});
         c.rstd = on_device(kF16, {4});
         return c.rms_norm();
       }},
      {"layer_norm_y_partial_overlap", kInvalid, "y: overlaps x",
       [] { NormCall c; c.y = shifted(c.x, 1); return c.layer_norm(); }},
      {"layer_norm_y_aliases_weight", kInvalid, "y: shares memory with weight",
       [] { NormCall c; c.weight = alias_of(c.y, kF32, {8}); return c.layer_norm(); }},
      {"rms_norm_rstd_aliases_x", kInvalid, "rstd: shares memory with x",
       [] { NormCall c; c.rstd = alias_of(c.x, kF32, {4}); return c.rms_norm(); }},
      {"layer_norm_mean_aliases_rstd", kInvalid, "mean: shares memory with rstd",
       [] { NormCall c; c.rstd = c.mean; return c.layer_norm(); }},
      {"layer_norm_x_non_dense_rows", kUnsupported, "x: the normalized dims must be dense",
       [] { NormCall c; c.x = with_strides(c.x, {1, 4}); return c.layer_norm(); }},
      {"layer_norm_row_too_long", kUnsupported, "x: rows longer than",
       [kTooLong] {
         NormCall c;
         // In place, and without weight or statistics: they would lie inside the 4 GiB this x
         // claims, and the overlap checks would answer first.
         c.x = c.y = with_sizes(c.x, {1, kTooLong});
         c.shape = NormShape::of({kTooLong});
         return reducekit::layer_norm(c.x, c.shape, nullptr, nullptr, c.eps, c.y, nullptr, nullptr, nullptr);
       }},
      {"layer_norm_workspace_too_small", kInvalid, "workspace:",
       [] {
         return layer_norm_with_spoiled_workspace([](const NormRequirements& r) {
           Workspace w = device_workspace(r.workspace_bytes);
           w.bytes -= 16;
           return w;
         });
       }},
      {"add_layer_norm_residual_shape", kInvalid, "residual: shape [4, 7] differs",
       [] { NormCall c; c.residual = on_device(kF32, {4, 7}); return c.add_layer_norm(); }},
      {"add_rms_norm_sum_dtype", kInvalid, "sum: dtype float16 differs",
       [] { NormCall c; c.sum = with_dtype(c.sum, kF16); return c.add_rms_norm(); }},
      {"add_layer_norm_sum_is_y", kInvalid, "sum: must not be y",
       [] { NormCall c; c.sum = c.y; return c.add_layer_norm(); }},
      {"add_rms_norm_y_rows_overlap", kInvalid, "y: its rows overlap",
       [] { NormCall c; c.y = with_strides(c.y, {0, 1}); return c.add_rms_norm(); }},
      {"add_layer_norm_sum_aliases_bias", kInvalid, "sum: shares memory with bias",
       [] { NormCall c; c.bias = alias_of(c.sum, kF32, {8}); return c.add_layer_norm(); }},
      // ---- layer_norm / rms_norm backward
      {"layer_norm_backward_dy_shape", kInvalid, "dy: shape [4, 7] differs from x's",
       [] { NormCall c; c.dy = on_device(kF32, {4, 7}); return c.layer_norm_backward(); }},
      {"layer_norm_backward_rstd_numel", kInvalid, "rstd: has 5 elements, expected 4",
       [] { NormCall c; c.rstd = on_device(kF32, {5}); return c.layer_norm_backward(); }},
      {"rms_norm_backward_dx_partial_overlap", kInvalid, "dx: overlaps x",
       [] { NormCall c; c.dx = shifted(c.x, 1); return c.rms_norm_backward(); }},
      {"layer_norm_backward_dweight_shape", kInvalid, "dweight: shape [7] does not match",
       [] { NormCall c; c.dweight = on_device(kF32, {7}); return c.layer_norm_backward(); }},
      {"layer_norm_backward_dbias_dtype_differs_from_dweight", kInvalid,
       "dbias: dtype float16 differs from dweight's float32",
       [] {
         NormCall c;
         c.x = on_device(kF16, {4, 8});
         c.dy = on_device(kF16, {4, 8});
         c.dx = on_device(kF16, {4, 8});
         c.dbias = on_device(kF16, {8});
         return reducekit::layer_norm_backward(c.dy, c.x, c.shape, c.mean, c.rstd, nullptr, &c.dx, &c.dweight,
                                               &c.dbias, c.ws, nullptr);
       }},
      {"layer_norm_backward_dweight_aliases_weight", kInvalid, "dweight: shares memory with weight",
       [] { NormCall c; c.dweight = c.weight; return c.layer_norm_backward(); }},
      {"rms_norm_backward_dweight_aliases_dy", kInvalid, "dweight: shares memory with dy",
       [] { NormCall c; c.dweight = alias_of(c.dy, kF32, {8}); return c.rms_norm_backward(); }},
      {"layer_norm_backward_dx_rows_overlap", kInvalid, "dx: its rows overlap",
       [] { NormCall c; c.dx = with_strides(c.dx, {0, 1}); return c.layer_norm_backward(); }},
      {"layer_norm_backward_workspace_missing", kInvalid, "workspace: needs",
       [] { return layer_norm_backward_with_spoiled_workspace([](std::size_t) { return Workspace{}; }); }},
      {"layer_norm_backward_workspace_too_small", kInvalid, "workspace: needs",
       [] {
         return layer_norm_backward_with_spoiled_workspace([](std::size_t bytes) {
           Workspace w = device_workspace(bytes);
           w.bytes -= 16;
           return w;
         });
       }},
      {"layer_norm_backward_workspace_misaligned", kInvalid, "workspace: must be 16-byte aligned",
       [] {
         return layer_norm_backward_with_spoiled_workspace([](std::size_t bytes) {
           return device_workspace(bytes, 8);
         });
       }},
      // ---- batch_norm
      {"batch_norm_training_x_rank_1", kInvalid, "x: batch_norm takes [N, C, *spatial] of rank 2 to 5, got rank 1",
       [] { BatchNormCall c; c.x = c.y = on_device(kF32, {6}); return c.training(); }},
      {"batch_norm_inference_x_rank_6", kInvalid, "got rank 6",
       [] { BatchNormCall c; c.x = c.y = on_device(kF32, {2, 3, 1, 1, 2, 2}); return c.inference(); }},
      {"batch_norm_reads_once_x_rank_0", kInvalid, "got rank 0",
       [] { BatchNormCall c; c.x = on_device(kF32, {}); return c.reads_once(); }},
      {"batch_norm_training_no_channels", kInvalid, "x: no channels",
       [] { BatchNormCall c; c.x = c.y = on_device(kF32, {2, 0, 4}); return c.training(); }},
      {"batch_norm_training_one_value_per_channel", kInvalid, "x: expected more than 1 value per channel",
       [] { BatchNormCall c; c.x = on_device(kF32, {1, 3}); c.y = on_device(kF32, {1, 3}); return c.training(); }},
      {"batch_norm_requirements_neither_layout", kUnsupported, "x: neither contiguous nor channels-last",
       [] {
         BatchNormCall c;
         c.x = with_strides(with_sizes(on_device(kF32, {2, 3, 8}), {2, 3, 4}), {24, 8, 2});
         BatchNormRequirements r;
         return c.requirements(&r);
       }},
      {"batch_norm_requirements_too_many_ctas", kUnsupported, "need more CTAs than one launch takes",
       [] {
         BatchNormCall c;
         c.x = make_contiguous_view(c.x.data, kF32, {1, int64_t(1) << 31, 2}, c.x.device);
         BatchNormRequirements r;
         return c.requirements(&r);
       }},
      {"batch_norm_training_running_mean_alone", kInvalid, "running_var: running_mean and running_var come together",
       [] { BatchNormCall c; c.with_running_var = false; return c.training(); }},
      {"batch_norm_training_weight_numel", kInvalid, "weight: 4 elements, expected 3 (one per channel)",
       [] { BatchNormCall c; c.weight = on_device(kF32, {4}); return c.training(); }},
      {"batch_norm_training_save_mean_dtype", kInvalid, "save_mean: expected float32, got float64",
       [] { BatchNormCall c; c.save_mean = on_device(kF64, {3}); return c.training(); }},
      {"batch_norm_inference_running_var_null_data", kInvalid, "running_var: null data pointer",
       [] { BatchNormCall c; c.running_var = with_data(c.running_var, nullptr); return c.inference(); }},
      {"batch_norm_training_y_strides", kInvalid, "y: must have x's strides",
       [] { BatchNormCall c; c.y = with_strides(c.y, {12, 1, 3}); return c.training(); }},
      {"batch_norm_training_y_partial_overlap", kInvalid, "y: overlaps x",
       [] { BatchNormCall c; c.y = shifted(c.x, 1); return c.training(); }},
      {"batch_norm_training_momentum_inf", kInvalid, "momentum:",
       [] { BatchNormCall c; c.options.momentum = INFINITY; return c.training(); }},
      {"batch_norm_inference_eps_nan", kInvalid, "eps:",
       [] { BatchNormCall c; c.options.eps = std::nan(""); return c.inference(); }},
      {"batch_norm_training_workspace_missing", kInvalid, "workspace:",
       [] { return BatchNormCall().training(); }},
      {"batch_norm_training_workspace_misaligned", kInvalid, "workspace: bytes must be 16-byte aligned",
       [] {
         BatchNormCall c;
         BatchNormRequirements r;
         REDUCEKIT_RETURN_IF_ERROR(c.requirements(&r));
         c.ws = device_workspace(r.workspace_bytes, 8);
         return c.training();
       }},
      {"batch_norm_training_y_aliases_weight", kInvalid, "y: shares memory with weight",
       [] { BatchNormCall c; c.weight = alias_of(c.y, kF32, {3}); return c.training(); }},
      {"batch_norm_training_save_invstd_is_running_var", kInvalid, "save_invstd: shares memory with running_var",
       [] { BatchNormCall c; c.running_var = c.save_invstd; return c.training(); }},
      {"batch_norm_training_running_mean_aliases_x", kInvalid, "running_mean: shares memory with x",
       [] { BatchNormCall c; c.running_mean = alias_of(c.x, kF32, {3}); return c.training(); }},
      {"batch_norm_inference_y_aliases_running_mean", kInvalid, "y: shares memory with running_mean",
       [] { BatchNormCall c; c.running_mean = alias_of(c.y, kF32, {3}); return c.inference(); }},
      {"batch_norm_backward_dy_shape", kInvalid, "dy: shape [2, 3, 5] differs",
       [] { BatchNormCall c; c.dy = on_device(kF32, {2, 3, 5}); return c.backward(); }},
      {"batch_norm_backward_dx_partial_overlap", kInvalid, "dx: overlaps dy",
       [] { BatchNormCall c; c.dx = shifted(c.dy, 1); return c.backward(); }},
      {"batch_norm_backward_dweight_aliases_save_mean", kInvalid, "dweight: shares memory with save_mean",
       [] { BatchNormCall c; c.dweight = c.save_mean; return c.backward(); }},
      {"batch_norm_backward_dbias_aliases_dy", kInvalid, "dbias: shares memory with dy",
       [] { BatchNormCall c; c.dbias = alias_of(c.dy, kF32, {3}); return c.backward(); }},
      // ---- cross_entropy
      {"cross_entropy_forward_target_float", kInvalid, "target: expected int64, got float32",
       [] { CrossEntropyCall c; c.target = on_device(kF32, {4}); return c.forward(); }},
      {"cross_entropy_forward_target_numel", kInvalid, "target: 5 elements, expected 4 (one per row)",
       [] { CrossEntropyCall c; c.target = on_device(kI64, {5}); return c.forward(); }},
      {"cross_entropy_forward_target_null_data", kInvalid, "target: null data pointer",
       [] { CrossEntropyCall c; c.target = with_data(c.target, nullptr); return c.forward(); }},
      {"cross_entropy_forward_target_between_elements", kInvalid, "target: data pointer",
       [] { CrossEntropyCall c; c.target = moved_by(c.target, 4); return c.forward(); }},
      {"cross_entropy_backward_dlogits_between_elements", kInvalid, "dlogits: data pointer",
       [] { CrossEntropyCall c; c.dlogits = moved_by(c.dlogits, 2); return c.backward(); }},
      {"cross_entropy_forward_target_host_memory", kInvalid, "target: expected a CUDA tensor",
       [] { CrossEntropyCall c; c.target = in_host_memory(kI64, {4}); return c.forward(); }},
      {"cross_entropy_forward_weight_numel", kInvalid, "weight: 9 elements, expected 10 (one per class)",
       [] { CrossEntropyCall c; c.weight = on_device(kF32, {9}); return c.forward(); }},
      {"cross_entropy_forward_no_classes", kInvalid, "logits: no classes",
       [] {
         CrossEntropyCall c;
         c.logits = on_device(kF32, {4, 0});
         c.weight = on_device(kF32, {0});
         return c.forward();
       }},
      {"cross_entropy_forward_class_dim_not_innermost", kUnsupported, "logits: the class dim must be innermost",
       [] { CrossEntropyCall c; c.logits = with_strides(c.logits, {1, 4}); return c.forward(); }},
      {"cross_entropy_forward_label_smoothing", kInvalid, "label_smoothing:",
       [] { CrossEntropyCall c; c.options.label_smoothing = 1.5; return c.forward(); }},
      {"cross_entropy_forward_softcap_negative", kInvalid, "softcap:",
       [] { CrossEntropyCall c; c.options.softcap = -1.0; return c.forward(); }},
      {"cross_entropy_backward_lse_square_scale_inf", kInvalid, "lse_square_scale:",
       [] { CrossEntropyCall c; c.options.lse_square_scale = INFINITY; return c.backward(); }},
      {"cross_entropy_forward_loss_dtype", kInvalid, "loss: expected float32, got float64",
       [] { CrossEntropyCall c; c.loss = on_device(kF64, {4}); return c.forward(); }},
      {"cross_entropy_forward_lse_is_loss", kInvalid, "loss: shares memory with lse",
       [] { CrossEntropyCall c; c.lse = c.loss; return c.forward(); }},
      {"cross_entropy_forward_loss_aliases_weight", kInvalid, "loss: shares memory with weight",
       [] { CrossEntropyCall c; c.loss = alias_of(c.weight, kF32, {4}); return c.forward(); }},
      {"cross_entropy_backward_grad_loss_numel", kInvalid, "grad_loss: 3 elements, expected 4",
       [] { CrossEntropyCall c; c.grad_loss = on_device(kF32, {3}); return c.backward(); }},
      {"cross_entropy_backward_dlogits_shape", kInvalid, "dlogits: shape [4, 11] differs",
       [] { CrossEntropyCall c; c.dlogits = on_device(kF32, {4, 11}); return c.backward(); }},
      {"cross_entropy_backward_dlogits_partial_overlap", kInvalid, "dlogits: overlaps logits",
       [] { CrossEntropyCall c; c.dlogits = shifted(c.logits, 1); return c.backward(); }},
      {"cross_entropy_backward_dlogits_is_logits", kUnsupported, "dlogits: the backward does not write over logits",
       [] { CrossEntropyCall c; c.dlogits = c.logits; return c.backward(); }},
      {"cross_entropy_backward_dlogits_rows_overlap", kInvalid, "dlogits: its rows overlap",
       [] { CrossEntropyCall c; c.dlogits = with_strides(c.dlogits, {0, 1}); return c.backward(); }},
      {"cross_entropy_backward_dlogits_aliases_lse", kInvalid, "dlogits: shares memory with lse",
       [] { CrossEntropyCall c; c.lse = alias_of(c.dlogits, kF32, {4}); return c.backward(); }},
      // ---- valid input: an answer, not an error
      {"softmax_rank_0_is_one", kOk, "",
       [] {
         SoftmaxCall c;
         c.x = on_device(kF32, {});
         c.y = on_device(kF32, {});
         c.dim = 0;
         const float three = 3.0f;
         if (cudaMemcpy(c.x.data, &three, sizeof three, cudaMemcpyHostToDevice) != cudaSuccess) std::exit(2);
         REDUCEKIT_RETURN_IF_ERROR(c.softmax());
         const std::vector<float> y = download<float>(c.y);
         return expect(y.size() == 1 && y[0] == 1.0f, "softmax of one element should be 1");
       }},
      {"softmax_no_rows", kOk, "",
       [] {
         SoftmaxCall c;
         c.x = c.y = make_contiguous_view(nullptr, kF32, {0, 8}, current_device());
         return c.softmax();
       }},
      {"sum_over_empty_dim_is_zero", kOk, "",
       [] {
         ReduceCall c;
         c.x = make_contiguous_view(nullptr, kF32, {3, 0}, current_device());  // no elements: no memory needed
         c.out = on_device(kF32, {3});
         if (cudaMemset(c.out.data, 0xff, 3 * sizeof(float)) != cudaSuccess) std::exit(2);
         ReduceRequirements r;
         REDUCEKIT_RETURN_IF_ERROR(c.requirements(&r));
         if (r.workspace_bytes > 0) c.ws = device_workspace(r.workspace_bytes);
         REDUCEKIT_RETURN_IF_ERROR(c.named());
         const std::vector<float> out = download<float>(c.out);
         return expect(out == std::vector<float>(3, 0.0f), "a sum over no elements should be 0");
       }},
      {"softmax_no_rows_at_any_pointer", kOk, "",  // an empty tensor's pointer is never read
       [] {
         SoftmaxCall c;
         c.x = c.y = moved_by(on_device(kF32, {0, 8}), 2);
         return c.softmax();
       }},
      {"argmax_of_no_rows", kOk, "",
       [] {
         ReduceCall c = reduce_call(ReduceOp::kArgmax);
         c.x = on_device(kF32, {0, 5});
         c.out = on_device(kI64, {0});
         return c.named();
       }},
      {"layer_norm_empty_rows_give_nan_statistics", kOk, "",
       [] {
         NormCall c;
         c.x = c.y = make_contiguous_view(nullptr, kF32, {2, 0}, current_device());
         c.shape = NormShape::of({0});
         c.weight = c.bias = make_contiguous_view(nullptr, kF32, {0}, current_device());
         c.mean = on_device(kF32, {2});
         c.rstd = on_device(kF32, {2});
         REDUCEKIT_RETURN_IF_ERROR(c.layer_norm());
         return expect(all_nan(download<float>(c.mean), 2) && all_nan(download<float>(c.rstd), 2),
                       "mean and rstd of empty rows should be NaN");
       }},
      {"batch_norm_empty_batch_gives_nan_statistics", kOk, "",
       [] {
         BatchNormCall c;
         c.x = c.y = make_contiguous_view(nullptr, kF32, {0, 3, 4}, current_device());
         REDUCEKIT_RETURN_IF_ERROR(c.training());
         return expect(all_nan(download<float>(c.save_mean), 3) && all_nan(download<float>(c.save_invstd), 3),
                       "save_mean and save_invstd of an empty batch should be NaN");
       }},
      {"cross_entropy_no_rows", kOk, "",
       [] {
         CrossEntropyCall c;
         c.logits = make_contiguous_view(nullptr, kF32, {0, 10}, current_device());
         c.target = make_contiguous_view(nullptr, kI64, {0}, current_device());
         c.loss = c.lse = make_contiguous_view(nullptr, kF32, {0}, current_device());
         return c.forward();
       }},
  };
}

// ---- the child's verdict ----------------------------------------------------------------------

const char* code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "kOk";
    case StatusCode::kInvalidArgument: return "kInvalidArgument";
    case StatusCode::kUnsupported: return "kUnsupported";
    case StatusCode::kCudaError: return "kCudaError";
  }
  return "an unknown code";
}

// Runs the case and exits 0 when it answered as expected, else 1 after printing what it got (the
// death test shows the child's output). On a GPU the device must also be healthy afterwards: a
// rejected call that launched a kernel on its bad arguments would show up here.
[[noreturn]] void answer_and_exit(const Case& c, bool check_device) {
  const Status s = c.call();
  std::string wrong;
  if (s.code() != c.code || s.message().find(c.names) == std::string::npos) {
    wrong = std::string("got ") + code_name(s.code()) + " \"" + s.message() + "\"; expected " + code_name(c.code) +
            " with \"" + c.names + "\" in the message";
  } else if (check_device) {
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) wrong = std::string("the device reports ") + cudaGetErrorString(err) + " after the call";
  }
  if (!wrong.empty()) std::fprintf(stderr, "%s: %s\n", c.name, wrong.c_str());
  std::fflush(stderr);
  std::exit(wrong.empty() ? 0 : 1);
}

// The child re-executes this binary rather than forking it: a forked child cannot use a CUDA
// context its parent made, and the GPU checks below make one.
void run_in_child(const Case& c, bool check_device) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(answer_and_exit(c, check_device), ::testing::ExitedWithCode(0), "") << c.name;
}

class BadInputHostDeathTest : public ::testing::TestWithParam<Case> {};
TEST_P(BadInputHostDeathTest, FailsClearlyOrAnswers) { run_in_child(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(Api, BadInputHostDeathTest, ::testing::ValuesIn(host_cases()), case_name);

class BadInputNoDeviceDeathTest : public ::testing::TestWithParam<Case> {};
TEST_P(BadInputNoDeviceDeathTest, ReportsTheMissingDevice) {
  if (testing_util::gpu_available())
    GTEST_SKIP() << "a CUDA device is present: the no-device answer cannot be observed here";
  run_in_child(GetParam(), false);
}
INSTANTIATE_TEST_SUITE_P(Api, BadInputNoDeviceDeathTest, ::testing::ValuesIn(no_device_cases()), case_name);

class BadInputGpuDeathTest : public ::testing::TestWithParam<Case> {};
TEST_P(BadInputGpuDeathTest, FailsClearlyOrAnswers) {
  REDUCEKIT_REQUIRE_GPU();
  run_in_child(GetParam(), true);
}
INSTANTIATE_TEST_SUITE_P(Api, BadInputGpuDeathTest, ::testing::ValuesIn(gpu_cases()), case_name);

}  // namespace
}  // namespace reducekit
