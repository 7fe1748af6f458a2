// SPDX-License-Identifier: Apache-2.0
#include "ops/checks.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace reducekit {
namespace {


// [first, last] byte addresses a view can touch; empty views touch nothing.
bool byte_span(const TensorView& t, uintptr_t* first, uintptr_t* last) {
  if (t.numel() == 0) return false;
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < t.rank; ++d) {
    const int64_t reach = (t.sizes[d] - 1) * t.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.data);
  const auto size = static_cast<int64_t>(dtype_size(t.dtype));
  *first = base + lo * size;
  *last = base + hi * size + size - 1;
  return true;
}

}  // namespace

Status current_device_attributes(DeviceAttributes* attributes) {
  constexpr int kCachedDevices = 64;
  static std::mutex mutex;
  static DeviceAttributes cache[kCachedDevices];
  static std::atomic<bool> cached[kCachedDevices] = {};
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    cudaGetLastError();
    return Status::cuda_error(std::string("device query: no usable CUDA device (") + cudaGetErrorString(err) + ")");
  }
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable && cached[device].load(std::memory_order_acquire)) {
    *attributes = cache[device];
    return Status::ok();
  }
  DeviceAttributes a;
  a.device = device;
  int cooperative = 0;
  if (cudaDeviceGetAttribute(&a.cc_major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.cc_minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess) {
    const cudaError_t err = cudaGetLastError();
    return Status::cuda_error("device query of CUDA device " + std::to_string(device) + " failed: " +
                              cudaGetErrorString(err));
  }
  a.cooperative = cooperative != 0;
  if (cacheable) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!cached[device].load(std::memory_order_relaxed)) {
      cache[device] = a;
      cached[device].store(true, std::memory_order_release);
    }
  }
  *attributes = a;
  return Status::ok();
}

namespace {

// The kernels are built for sm_90 (later GPUs run them from their PTX); on an older GPU the first
// launch would fail with "no kernel image", so the first check says why instead.
Status check_compute_capability(const DeviceAttributes& device, const char* name) {
  if (device.cc_major < 9)
    return Status::unsupported(std::string(name) + ": CUDA device " + std::to_string(device.device) +
                               " has compute capability " + std::to_string(device.cc_major) + "." +
                               std::to_string(device.cc_minor) + "; reducekit's kernels need 9.0 (Hopper) or newer");
  return Status::ok();
}

}  // namespace

std::string shape_string(const int64_t* sizes, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
  return s + "]";
}

namespace detail {
Status resident_ctas(const void* kernel, int threads, std::size_t smem, int* ctas) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, std::size_t, int>, int> cache;
  DeviceAttributes device;
  REDUCEKIT_RETURN_IF_ERROR(current_device_attributes(&device));
  const auto key = std::make_tuple(kernel, threads, smem, device.device);
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) {
    *ctas = it->second;
    return Status::ok();
  }
  int per_sm = 0;
  if (const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
      err != cudaSuccess) {
    cudaGetLastError();  // clear it: the Status carries the error now
    return Status::cuda_error(std::string("occupancy query failed: ") + cudaGetErrorString(err));
  }
  *ctas = cache[key] = std::max(1, per_sm) * device.sms;
  return Status::ok();
}
}  // namespace detail

Status check_element_aligned(const TensorView& t, const char* name) {
  const std::size_t bytes = dtype_size(t.dtype);
  if (bytes > 1 && reinterpret_cast<uintptr_t>(t.data) % bytes != 0 && t.numel() > 0) {
    char address[32];
    std::snprintf(address, sizeof(address), "%p", t.data);
    return Status::invalid_argument(std::string(name) + ": data pointer " + address + " is not aligned to its " +
                                    dtype_name(t.dtype) + " elements (" + std::to_string(bytes) + " bytes)");
  }
  return Status::ok();
}

Status check_float_device_tensor(const TensorView& t, const char* name) {
  if (t.rank < 0 || t.rank > kMaxRank)
    return Status::invalid_argument(std::string(name) + ": rank " + std::to_string(t.rank) +
                                    " is outside 0.." + std::to_string(kMaxRank));
  if (!is_floating(t.dtype))
    return Status::invalid_argument(std::string(name) + ": expected float32, float16, bfloat16 or float64, got " +
                                    dtype_name(t.dtype));
  if (t.device == kHostDevice)
    return Status::invalid_argument(std::string(name) + ": expected a CUDA tensor, got host memory");
  REDUCEKIT_RETURN_IF_ERROR(check_element_aligned(t, name));
  // One device query (cached attributes after the first call) for the device and its capability.
  DeviceAttributes current;
  if (!current_device_attributes(&current).is_ok())
    return Status::cuda_error(std::string(name) + ": no usable CUDA device");
  if (t.device != current.device)
    return Status::invalid_argument(std::string(name) + ": on CUDA device " + std::to_string(t.device) +
                                    " but the current device is " + std::to_string(current.device));
  if (Status s = check_compute_capability(current, name); !s.is_ok()) return s;
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] < 0)
      return Status::invalid_argument(std::string(name) + ": negative size in " + shape_string(t));
  if (t.data == nullptr && t.numel() > 0)
    return Status::invalid_argument(std::string(name) + ": null data pointer for a non-empty tensor");
  return Status::ok();
}

Status check_dense_vector(const TensorView& t, const char* name, DType dtype, int64_t numel, const char* what) {
  if (t.rank < 0 || t.rank > kMaxRank)
    return Status::invalid_argument(std::string(name) + ": rank " + std::to_string(t.rank) + " is outside 0.." +
                                    std::to_string(kMaxRank));
  if (t.dtype != dtype)
    return Status::invalid_argument(std::string(name) + ": expected " + dtype_name(dtype) + ", got " +
                                    dtype_name(t.dtype));
  if (t.device == kHostDevice) return Status::invalid_argument(std::string(name) + ": expected a CUDA tensor, got host memory");
  REDUCEKIT_RETURN_IF_ERROR(check_element_aligned(t, name));
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || t.device != current) {
    cudaGetLastError();
    return Status::invalid_argument(std::string(name) + ": not on the current CUDA device");
  }
  if (t.numel() != numel)
    return Status::invalid_argument(std::string(name) + ": " + std::to_string(t.numel()) + " elements, expected " +
                                    std::to_string(numel) + " (" + what + ")");
  if (!t.is_contiguous()) return Status::unsupported(std::string(name) + ": must be contiguous");
  if (t.data == nullptr && numel > 0) return Status::invalid_argument(std::string(name) + ": null data pointer");
  return Status::ok();
}

Status check_matches(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  if (t.device != ref.device)
    return Status::invalid_argument(std::string(name) + ": on device " + std::to_string(t.device) + " but " +
                                    ref_name + " is on device " + std::to_string(ref.device));
  if (t.dtype != ref.dtype)
    return Status::invalid_argument(std::string(name) + ": dtype " + dtype_name(t.dtype) + " differs from " +
                                    ref_name + "'s " + dtype_name(ref.dtype));
  bool same = t.rank == ref.rank;
  for (int d = 0; same && d < t.rank; ++d) same = t.sizes[d] == ref.sizes[d];
  if (!same)
    return Status::invalid_argument(std::string(name) + ": shape " + shape_string(t) + " differs from " +
                                    ref_name + "'s " + shape_string(ref));
  return Status::ok();
}

Status check_no_partial_overlap(const TensorView& out, const char* out_name, const TensorView& in,
                                const char* in_name) {
  uintptr_t a0, a1, b0, b1;
  if (!byte_span(out, &a0, &a1) || !byte_span(in, &b0, &b1)) return Status::ok();
  if (a1 < b0 || b1 < a0) return Status::ok();
  const bool identical = out.data == in.data && out.rank == in.rank && out.dtype == in.dtype &&
                         std::equal(out.strides, out.strides + out.rank, in.strides);
  if (identical) return Status::ok();
  return Status::invalid_argument(std::string(out_name) + ": overlaps " + in_name +
                                  " without being the same view (in-place use must pass the same tensor)");
}

Status check_disjoint(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    if (out->view == nullptr) continue;
    uintptr_t a0, a1, b0, b1;
    if (!byte_span(*out->view, &a0, &a1)) continue;
    const auto shares = [&](const NamedView& other) {
      return other.view != nullptr && byte_span(*other.view, &b0, &b1) && !(a1 < b0 || b1 < a0);
    };
    for (auto later = out + 1; later != outputs.end(); ++later)
      if (shares(*later))
        return Status::invalid_argument(std::string(out->name) + ": shares memory with " + later->name +
                                        " (each output needs memory of its own)");
    for (const NamedView& in : inputs)
      if (shares(in))
        return Status::invalid_argument(std::string(out->name) + ": shares memory with " + in.name +
                                        ", which the call reads while writing " + out->name);
  }
  return Status::ok();
}

Status check_output_rows(int64_t rows, int64_t cols, int64_t row_stride, const char* name) {
  if (rows <= 1 || cols == 0 || row_stride >= cols) return Status::ok();
  return Status::invalid_argument(std::string(name) + ": its rows overlap (row stride " + std::to_string(row_stride) +
                                  " below the row length " + std::to_string(cols) +
                                  "), so two rows would write one element");
}

namespace {
// One region of a workspace: there, at least `need` bytes, 16-byte aligned; `what` names it.
Status check_region(const void* data, std::size_t have, std::size_t need, const char* what) {
  if (data == nullptr || have < need)
    return Status::invalid_argument("workspace: " + std::to_string(need) + " " + what + " needed, " +
                                    std::to_string(data ? have : 0) + " given");
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0)
    return Status::invalid_argument(std::string("workspace: ") + what + " must be 16-byte aligned");
  return Status::ok();
}
}  // namespace

WorkspaceRegions workspace_regions(const Workspace& ws, std::size_t zeroed_bytes) {
  if (ws.tickets != nullptr && zeroed_bytes > 0) return {ws.tickets, ws.data};
  auto* base = static_cast<unsigned char*>(ws.data);
  return {base, base != nullptr ? base + zeroed_bytes : nullptr};
}

Status check_workspace(const Workspace& ws, std::size_t bytes, std::size_t zeroed_bytes) {
  if (bytes == 0) return Status::ok();
  if (ws.tickets == nullptr || zeroed_bytes == 0) return check_region(ws.data, ws.bytes, bytes, "bytes");
  // Tickets apart: `data` holds the rest only.
  REDUCEKIT_RETURN_IF_ERROR(check_region(ws.tickets, ws.ticket_bytes, zeroed_bytes, "ticket bytes"));
  const std::size_t rest = bytes - zeroed_bytes;
  return rest == 0 ? Status::ok() : check_region(ws.data, ws.bytes, rest, "bytes besides the tickets");
}

}  // namespace reducekit
