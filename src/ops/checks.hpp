// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by every op. Each returns a Status whose message starts with the
// argument's name, so a binding can pass it to the user unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

// "[2, 3, 4]": sizes as error messages print them.
std::string shape_string(const int64_t* sizes, int rank);
inline std::string shape_string(const TensorView& t) { return shape_string(t.sizes, t.rank); }

// The dtype of per-row and per-channel values (statistics, losses, norm parameters): float32,
// float64 for float64 inputs (DESIGN.md, Numerics).
inline DType accumulation_dtype(DType input) { return input == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// A floating-point tensor on the current CUDA device with a data pointer when non-empty.
// The current CUDA device's attributes that plans and launches read on every call, queried once
// a device: each cudaDeviceGetAttribute cost about 0.35 us of host time, and a softmax call asked
// six of them. Fails with a kCudaError starting "device query" when no device is usable.
struct DeviceAttributes {
  int device = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int sms = 0;
  int smem_optin = 0;   // the most shared memory a CTA may opt in to
  int smem_per_sm = 0;
  bool cooperative = false;  // cooperative grid launches
};
Status current_device_attributes(DeviceAttributes* attributes);

namespace detail {
// CTAs of `kernel` (a __global__ function's address) the current device holds at once (per SM x
// SMs), per (kernel, CTA size, shared memory), cached: the query is host work repeated on every
// call otherwise.
Status resident_ctas(const void* kernel, int threads, std::size_t smem, int* ctas);
}  // namespace detail

// A data pointer at a multiple of the element size: kernels read whole elements (and vectors
// of them), so a pointer between elements is rejected, naming the argument, before any launch.
// An empty tensor's pointer is never read, so any pointer passes.
Status check_element_aligned(const TensorView& t, const char* name);

Status check_float_device_tensor(const TensorView& t, const char* name);

// A contiguous tensor of `numel` elements of `dtype` on the current CUDA device (a per-row or
// per-channel vector); `what` says where numel comes from ("one per row").
Status check_dense_vector(const TensorView& t, const char* name, DType dtype, int64_t numel, const char* what);

// Same sizes, dtype and device as `ref` (callers check t itself with check_float_device_tensor).
Status check_matches(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name);

// `out` may be `in` exactly (an in-place op) but must not otherwise share memory with it.
Status check_no_partial_overlap(const TensorView& out, const char* out_name, const TensorView& in,
                                const char* in_name);

// A tensor of a call, or an absent optional one (view null), named as errors print it.
struct NamedView {
  const TensorView* view;
  const char* name;
};

// No output shares memory with another output or with any of `inputs` (absent ones skipped):
// for the pairs that have no in-place form, e.g. y and weight, mean and x. Errors name the output.
Status check_disjoint(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs);

// The rows of an output (`rows` of `cols` elements, `row_stride` apart) do not overlap one another:
// a zero or short row stride (an expanded view) would have two rows write one element.
Status check_output_rows(int64_t rows, int64_t cols, int64_t row_stride, const char* name);

// A workspace of `bytes` device bytes whose first `zeroed_bytes` (the tickets) may live apart
// in Workspace::tickets; 16-byte aligned. Errors name "workspace".
Status check_workspace(const Workspace& ws, std::size_t bytes, std::size_t zeroed_bytes);

// Where a workspace that check_workspace accepted keeps its zeroed prefix (tickets, counters)
// and the rest: apart when Workspace::tickets is given, else one block, zeroed bytes first.
struct WorkspaceRegions {
  void* zeroed = nullptr;
  void* rest = nullptr;
};
WorkspaceRegions workspace_regions(const Workspace& ws, std::size_t zeroed_bytes);

}  // namespace reducekit
