// SPDX-License-Identifier: Apache-2.0
// What a reduction kernel is given: the canonical problem (plan/reduction_plan.hpp), where its
// outputs go, and its workspace. Plain structs, shared by host launch code and device code; the
// fixed shapes the kernels are compiled for are the planner's (plan/reduce_config.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "plan/reduce_config.hpp"  // the shapes the kernels are compiled for
#include "reducekit/tensor.hpp"

namespace reducekit::kernels {

// Which finished value a policy writes (the policies that serve several ops read it).
enum class ReduceMode : int8_t { kSum, kMean, kVar, kStd, kVarMean, kStdMean, kOther };

struct ReduceOutputs {
  void* out = nullptr;       // dense, one element per output
  void* mean_out = nullptr;  // var_mean / std_mean only
  DType out_type = DType::kFloat32;
  DType mean_type = DType::kFloat32;
  ReduceMode mode = ReduceMode::kOther;
  double correction = 0.0;  // moments only
};

struct ReduceArgs {
  const void* x = nullptr;
  // The canonical problem; element offsets (see reduction_plan.hpp).
  int64_t outer = 0;
  int64_t reduced = 0;
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t reduced_stride = 1;
  bool aligned = false;  // 16-byte vector loads are safe; changes how bytes move, never a result
  ReduceOutputs outs;
  // From ReduceConfig (plan/reduce_config.hpp).
  int64_t chunk = 0;
  int64_t chunks = 1;
  int64_t tiles = 0;
  int64_t parts = 1;      // column path: CTAs per (outer index, tile), 1, min(8, segments) or segments
  unsigned* tickets = nullptr;  // zero on entry, zero again on exit
  void* partials = nullptr;
};

}  // namespace reducekit::kernels
