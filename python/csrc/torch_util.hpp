// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the torch.ops.reducekit adapters: optional tensor arguments (given), at::Tensor
// -> TensorView, a failed Status -> a Python exception carrying the core's message (which names the
// argument), workspaces, and the one fallback for layouts the core cannot read in place
// (with_layout_fallback).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "find_op.hpp"
#include "reducekit/reducekit.hpp"

namespace reducekit_torch {

using OptionalTensor = std::optional<at::Tensor>;

// An optional tensor argument that holds a tensor (Tensor? given, not None or undefined).
inline bool given(const OptionalTensor& t) { return t.has_value() && t->defined(); }

// A fresh contiguous tensor from the CUDA caching allocator without a trip through the dispatcher
// (at::empty is about a microsecond of host time a call, and an op makes up to four); elsewhere
// at::empty. at::empty_like stays where an output keeps its input's layout (channels-last).
inline at::Tensor device_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return options.device().is_cuda() ? at::Tensor(at::detail::empty_cuda(sizes, options)) : at::empty(sizes, options);
}

inline reducekit::DType to_dtype(at::ScalarType t, const char* name) {
  switch (t) {
    case at::kFloat: return reducekit::DType::kFloat32;
    case at::kHalf: return reducekit::DType::kFloat16;
    case at::kBFloat16: return reducekit::DType::kBFloat16;
    case at::kDouble: return reducekit::DType::kFloat64;
    case at::kLong: return reducekit::DType::kInt64;
    default: TORCH_CHECK(false, name, ": expected float32, float16, bfloat16 or float64, got ", t);
  }
}

inline reducekit::TensorView to_view(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() <= reducekit::kMaxRank, name, ": rank ", t.dim(), " exceeds ", reducekit::kMaxRank);
  reducekit::TensorView v;
  v.data = t.data_ptr();
  v.dtype = to_dtype(t.scalar_type(), name);
  v.rank = static_cast<int>(t.dim());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  v.device = t.is_cuda() ? t.get_device() : reducekit::kHostDevice;
  return v;
}

inline void throw_if_failed(const reducekit::Status& s) { TORCH_CHECK(s.is_ok(), s.message()); }

inline void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, ": expected a CUDA tensor, got one on ", t.device());
}

// Completion tickets and arrival counters: zero on entry, and every kernel leaves the ones it
// used zero again, so one buffer per (device, stream), zeroed once when made (or grown), serves
// every later call on that stream: no memset node per call (it cost ~1-2 us of GPU time on small
// reductions). Calls on one stream run in order, so they never share a ticket at the same time.
// The map is leaked on purpose (no tensor freed after the allocator at process exit); the
// caching allocator frees a replaced buffer in stream order on the same stream. One map for
// every op family (an inline function's static is one object across translation units).
inline at::Tensor ticket_buffer(const at::Tensor& x, cudaStream_t stream, std::size_t bytes) {
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& t = (*buffers)[{static_cast<int>(x.get_device()), stream}];
  if (!t.defined() || static_cast<std::size_t>(t.numel()) < bytes) {
    const int64_t size = static_cast<int64_t>((bytes + 4095) / 4096 * 4096);
    t = at::zeros({size}, x.options().dtype(at::kByte));
  }
  return t;
}

inline bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  TORCH_CHECK(err == cudaSuccess, "stream: capture query failed: ", cudaGetErrorString(err));
  return status != cudaStreamCaptureStatusNone;
}

// The workspace of one core call needing `bytes`, the first `zeroed_bytes` zero on entry: the
// zeroed part from ticket_buffer, the rest from the caching allocator. Under graph capture all
// of it comes from the graph's pool, cleared by a memset node in the graph (a buffer kept across
// calls would outlive that pool). Holds the tensors for the call.
struct CallWorkspace {
  at::Tensor tickets, data;
  reducekit::Workspace ws;

  CallWorkspace(const at::Tensor& x, cudaStream_t stream, std::size_t bytes, std::size_t zeroed_bytes) {
    if (bytes > 0 && zeroed_bytes > 0 && !capturing(stream)) {
      tickets = ticket_buffer(x, stream, zeroed_bytes);  // by value: held for the call
      const std::size_t rest = bytes - zeroed_bytes;
      if (rest > 0) data = device_empty({static_cast<int64_t>(rest)}, x.options().dtype(at::kByte));
      ws.data = rest > 0 ? data.data_ptr() : nullptr;
      ws.bytes = rest;
      ws.tickets = tickets.data_ptr();
      ws.ticket_bytes = static_cast<std::size_t>(tickets.numel());
    } else if (bytes > 0) {
      data = device_empty({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
      ws.data = data.data_ptr();
      ws.bytes = bytes;
      const cudaError_t err = cudaMemsetAsync(ws.data, 0, zeroed_bytes, stream);
      TORCH_CHECK(err == cudaSuccess, "workspace: clearing failed: ", cudaGetErrorString(err));
    }
  }
};

// A core call with the workspace its requirements ask for: `ask(&req)` fills a *Requirements
// (softmax's, the norms'; workspace_bytes and workspace_zeroed_bytes), `call(workspace)` runs.
// An error from `ask` is returned as it is (callers fall back on kUnsupported layouts).
template <class Requirements, class Ask, class Call>
reducekit::Status with_call_workspace(const at::Tensor& x, cudaStream_t stream, Ask ask, Call call) {
  Requirements req;
  const reducekit::Status s = ask(&req);
  if (!s.is_ok()) return s;
  const CallWorkspace workspace(x, stream, req.workspace_bytes, req.workspace_zeroed_bytes);
  return call(workspace.ws);
}

// ---- the fallback for layouts the core cannot read in place ---------------------------------
// The core answers kUnsupported for a layout it cannot address (and for a few limits that no
// layout lifts; a second try gives the same answer there). An adapter calls the core on the
// tensors as given, so the common case copies nothing, and only on that answer again on copies
// in a layout the core reads.

// The layouts the fallback copies into: an order of the dims (`arrange`, a view; `restore` undoes
// it), made contiguous.
struct RowMajor {  // the dims as they are: plain contiguous copies
  at::Tensor arrange(const at::Tensor& t) const { return t; }
  at::Tensor restore(const at::Tensor& t) const { return t; }
};
struct DimLast {  // `dim` (wrapped) moved innermost: rows over any dim become rows the kernels read
  int64_t dim;
  at::Tensor arrange(const at::Tensor& t) const { return t.movedim(dim, -1); }
  at::Tensor restore(const at::Tensor& t) const { return t.movedim(-1, dim); }
};

// One tensor of a core call and what the call does with it. The fallback copies what is read
// into the layout, gives what is only written a fresh tensor there (unless its own memory already
// is in it; its old contents are not copied), and copies what was written back afterwards.
struct Operand {
  enum class Access { kRead, kWrite, kReadWrite };
  const at::Tensor* tensor;
  Access access;
  static Operand in(const at::Tensor& t) { return {&t, Access::kRead}; }
  static Operand out(const at::Tensor& t) { return {&t, Access::kWrite}; }
  static Operand in_out(const at::Tensor& t) { return {&t, Access::kReadWrite}; }
};

// The tensors of one try, in the operands' order: t[i].
template <std::size_t N> struct CallTensors {
  std::array<const at::Tensor*, N> tensors;
  const at::Tensor& operator[](std::size_t i) const { return *tensors[i]; }
};

// A result the core wrote into a temporary (a copy in another layout or dtype) goes back into the
// caller's tensor; where it wrote into that tensor's own memory, there is nothing to copy.
inline void copy_back(const at::Tensor& written, const at::Tensor& target) {
  if (!written.is_alias_of(target)) target.copy_(written);
}

// Runs `run(t, relaid)` (returning the core's Status) over the operands as given, relaid = false.
// Where the core answers kUnsupported, runs it once more over the operands in `layout`, relaid =
// true (an argument that depends on the layout, such as softmax's dim, takes its value there),
// then copies the written operands back. Any other failure, or the second try's, throws the
// core's message; so does kUnsupported where the layout would hand the core the same views again.
template <class Layout = RowMajor, class Run, std::size_t N>
void with_layout_fallback(const Operand (&operands)[N], Run run, const Layout& layout = {}) {
  CallTensors<N> given;
  for (std::size_t i = 0; i < N; ++i) given.tensors[i] = operands[i].tensor;
  const reducekit::Status s = run(given, false);
  if (s.code() != reducekit::StatusCode::kUnsupported) return throw_if_failed(s);

  std::array<at::Tensor, N> relaid;  // undefined operands (an absent optional) stay undefined
  CallTensors<N> copies;
  bool changed = false;
  for (std::size_t i = 0; i < N; ++i) {
    const at::Tensor& t = *operands[i].tensor;
    copies.tensors[i] = &relaid[i];
    if (!t.defined()) continue;
    const at::Tensor arranged = layout.arrange(t);
    if (operands[i].access != Operand::Access::kWrite) relaid[i] = arranged.contiguous();
    else relaid[i] = arranged.is_contiguous() ? arranged : device_empty(arranged.sizes(), arranged.options());
    changed = changed || relaid[i].const_data_ptr() != t.const_data_ptr() || !relaid[i].sizes().equals(t.sizes()) ||
              !relaid[i].strides().equals(t.strides());
  }
  if (!changed) return throw_if_failed(s);
  throw_if_failed(run(copies, true));
  for (std::size_t i = 0; i < N; ++i)
    if (operands[i].access != Operand::Access::kRead && relaid[i].defined())
      copy_back(layout.restore(relaid[i]), *operands[i].tensor);
}

}  // namespace reducekit_torch
