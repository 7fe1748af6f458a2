// SPDX-License-Identifier: Apache-2.0
// Kernel launches the ops share: a launch's error as a Status, and cudaLaunchKernelEx launches
// with attributes (clusters, programmatic dependent launch).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "reducekit/status.hpp"

namespace reducekit::detail {

// The last launch's error (cleared) as a Status naming `what`.
inline Status launch_status(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status::cuda_error(std::string(what) + " launch failed: " + cudaGetErrorString(err));
}

// One cudaLaunchKernelEx launch of `grid` CTAs with `count` launch attributes (a cluster shape,
// the cooperative flag, programmatic serialization). A launch error is cleared and returned as
// the Status.
template <class... KernelArgs, class... Args>
Status launch_with_attributes(void (*kernel)(KernelArgs...), int64_t grid, int threads, std::size_t smem,
                              cudaStream_t stream, cudaLaunchAttribute* attributes, int count, const char* name,
                              Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = static_cast<unsigned>(count);
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the Status carries the error now
    return Status::cuda_error(std::string(name) + " launch failed: " + cudaGetErrorString(err));
  }
  return launch_status(name);
}

template <class... KernelArgs, class... Args>
Status launch_with_attribute(void (*kernel)(KernelArgs...), int64_t grid, int threads, std::size_t smem,
                             cudaStream_t stream, cudaLaunchAttribute attribute, const char* name, Args... args) {
  return launch_with_attributes(kernel, grid, threads, smem, stream, &attribute, 1, name, args...);
}

// The attribute that lets a kernel start before the one ahead of it in the stream ends. Only for
// a kernel that waits (wait_for_previous_grid) before it reads what the kernel ahead writes, and
// behind a kernel the library launched itself: that one began only after all work before it
// ended, and touches none of the memory the overlapping kernel accesses before waiting.
inline cudaLaunchAttribute overlap_previous_attribute() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

}  // namespace reducekit::detail
