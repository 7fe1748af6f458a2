// SPDX-License-Identifier: Apache-2.0
// The reduction family's entry points: argument checks, planning (plan/reduction_plan.hpp, then
// plan/reduce_config.hpp), and dispatch to the per-statistic launchers (reduce_dispatch.hpp).
// Nothing here touches device memory before every check has passed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "ops/checks.hpp"
#include "plan/reduce_config.hpp"
#include "ops/reduce_dispatch.hpp"
#include "plan/reduction_plan.hpp"
#include "reducekit/reduce.hpp"

namespace reducekit {
namespace {

using kernels::ReduceMode;

bool needs_nonempty_set(ReduceOp op) {
  return reduce_op_gives_indices(op) || op == ReduceOp::kAmax || op == ReduceOp::kAmin;
}

Status to_reduce_dims(DimList dims, ReduceDims* out) {
  if (dims.all) {
    *out = ReduceDims::all_dims();
    return Status::ok();
  }
  if (dims.count < 0 || dims.count > kMaxRank)
    return Status::invalid_argument("dim: " + std::to_string(dims.count) + " dims given, at most " +
                                    std::to_string(kMaxRank) + " are supported");
  if (dims.count > 0 && dims.dims == nullptr) return Status::invalid_argument("dim: null list of dims");
  ReduceDims r;
  r.count = dims.count;
  std::copy(dims.dims, dims.dims + dims.count, r.dims);
  *out = r;
  return Status::ok();
}

Status empty_set_error(ReduceOp op, const TensorView& x, const ReductionPlan& p) {
  for (int d = 0; d < x.rank; ++d)
    if (p.reduced_mask[d] && x.sizes[d] == 0)
      return Status::invalid_argument("dim: " + std::string(reduce_op_name(op)) + " over dim " + std::to_string(d) +
                                      " of size 0 is undefined (an empty set has no extreme value); reduce over "
                                      "non-empty dims");
  return Status::invalid_argument("dim: " + std::string(reduce_op_name(op)) + " of an empty set is undefined");
}

// The plan and launch a call runs, shared by reduce_requirements() and reduce().
struct Prepared {
  ReductionPlan plan;
  ReduceConfig config;
};

Status prepare(ReduceOp op, const TensorView& x, DimList dims, bool keepdim, Prepared* prep) {
  // An integer cast to ReduceOp out of range would otherwise run the moments kernel.
  const int op_value = static_cast<int>(op);
  if (op_value < static_cast<int>(ReduceOp::kSum) || op_value > static_cast<int>(ReduceOp::kStdMean))
    return Status::invalid_argument("op: " + std::to_string(op_value) + " is not a ReduceOp");
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, "x"));
  ReduceDims rd;
  REDUCEKIT_RETURN_IF_ERROR(to_reduce_dims(dims, &rd));
  ReductionPlan& p = prep->plan;
  // argmax / argmin index the reduced set in x's dim order.
  REDUCEKIT_RETURN_IF_ERROR(plan_reduction(x, rd, keepdim, &p, reduce_op_gives_indices(op)));
  if (needs_nonempty_set(op) && p.reduced == 0) return empty_set_error(op, x, p);
  if (!p.needs_copy) prep->config = plan_reduce_kernel(p, static_cast<int>(dtype_size(x.dtype)), reduce_knobs());
  return Status::ok();
}

DType expected_out_type(ReduceOp op, const TensorView& x, const TensorView& out) {
  if (reduce_op_gives_indices(op)) return DType::kInt64;
  if (op == ReduceOp::kSum || op == ReduceOp::kMean) return is_floating(out.dtype) ? out.dtype : DType::kFloat32;
  return x.dtype;
}

Status check_output(const TensorView& t, const char* name, DType dtype, const ReductionPlan& p, const TensorView& x) {
  if (t.rank < 0 || t.rank > kMaxRank)
    return Status::invalid_argument(std::string(name) + ": rank " + std::to_string(t.rank) + " is outside 0.." +
                                    std::to_string(kMaxRank));
  if (t.device != x.device)
    return Status::invalid_argument(std::string(name) + ": on device " + std::to_string(t.device) +
                                    " but x is on device " + std::to_string(x.device));
  if (t.dtype != dtype)
    return Status::invalid_argument(std::string(name) + ": expected dtype " + dtype_name(dtype) + ", got " +
                                    dtype_name(t.dtype));
  if (t.rank != p.out_rank || !std::equal(t.sizes, t.sizes + t.rank, p.out_sizes))
    return Status::invalid_argument(std::string(name) + ": expected shape " + shape_string(p.out_sizes, p.out_rank) +
                                    ", got " + shape_string(t.sizes, t.rank));
  if (!t.is_contiguous()) return Status::invalid_argument(std::string(name) + ": must be contiguous");
  if (t.data == nullptr && t.numel() > 0)
    return Status::invalid_argument(std::string(name) + ": null data pointer for a non-empty tensor");
  return check_element_aligned(t, name);
}

// No sharing at all: an output written while x (or the other output) is still being read.
Status check_disjoint(const TensorView& out, const char* out_name, const TensorView& in, const char* in_name) {
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(out, out_name, in, in_name));
  if (out.numel() > 0 && in.numel() > 0 && out.data == in.data)
    return Status::invalid_argument(std::string(out_name) + ": shares memory with " + in_name);
  return Status::ok();
}

ReduceMode mode_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ReduceMode::kSum;
    case ReduceOp::kMean: return ReduceMode::kMean;
    case ReduceOp::kVar: return ReduceMode::kVar;
    case ReduceOp::kStd: return ReduceMode::kStd;
    case ReduceOp::kVarMean: return ReduceMode::kVarMean;
    case ReduceOp::kStdMean: return ReduceMode::kStdMean;
    default: return ReduceMode::kOther;
  }
}

Status launch(ReduceOp op, const ReduceLaunch& l, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return launch_sum(l, stream);
    case ReduceOp::kProd: return launch_prod(l, stream);
    case ReduceOp::kAmax: return launch_amax(l, stream);
    case ReduceOp::kAmin: return launch_amin(l, stream);
    case ReduceOp::kArgmax: return launch_argmax(l, stream);
    case ReduceOp::kArgmin: return launch_argmin(l, stream);
    case ReduceOp::kLogsumexp: return launch_logsumexp(l, stream);
    default: return launch_moments(l, stream);
  }
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kAmax: return "amax";
    case ReduceOp::kAmin: return "amin";
    case ReduceOp::kArgmax: return "argmax";
    case ReduceOp::kArgmin: return "argmin";
    case ReduceOp::kLogsumexp: return "logsumexp";
    case ReduceOp::kVar: return "var";
    case ReduceOp::kStd: return "std";
    case ReduceOp::kVarMean: return "var_mean";
    case ReduceOp::kStdMean: return "std_mean";
  }
  return "unknown";
}

Status reduce_requirements(ReduceOp op, const TensorView& x, DimList dims, bool keepdim, ReduceRequirements* r) {
  if (r == nullptr) return Status::invalid_argument("requirements: is null");
  Prepared prep;
  REDUCEKIT_RETURN_IF_ERROR(prepare(op, x, dims, keepdim, &prep));
  ReduceRequirements out;
  out.out_rank = prep.plan.out_rank;
  std::copy(prep.plan.out_sizes, prep.plan.out_sizes + kMaxRank, out.out_sizes);
  out.needs_copy = prep.plan.needs_copy;
  std::copy(prep.plan.permutation, prep.plan.permutation + kMaxRank, out.permutation);
  if (!out.needs_copy) {
    out.workspace_bytes = prep.config.workspace_bytes;
    out.workspace_zeroed_bytes = prep.config.zeroed_bytes;
  }
  *r = out;
  return Status::ok();
}

Status reduce(ReduceOp op, const TensorView& x, DimList dims, bool keepdim, double correction, const TensorView& out,
              const TensorView& mean_out, const Workspace& workspace, cudaStream_t stream) {
  Prepared prep;
  REDUCEKIT_RETURN_IF_ERROR(prepare(op, x, dims, keepdim, &prep));
  const ReductionPlan& p = prep.plan;
  REDUCEKIT_RETURN_IF_ERROR(check_output(out, "out", expected_out_type(op, x, out), p, x));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint(out, "out", x, "x"));
  if (reduce_op_has_mean_output(op)) {
    REDUCEKIT_RETURN_IF_ERROR(check_output(mean_out, "mean_out", x.dtype, p, x));
    REDUCEKIT_RETURN_IF_ERROR(check_disjoint(mean_out, "mean_out", x, "x"));
    REDUCEKIT_RETURN_IF_ERROR(check_disjoint(mean_out, "mean_out", out, "out"));
  }
  if (p.needs_copy)
    return Status::unsupported(std::string("x: ") + reduce_op_name(op) +
                               " cannot read this layout in place; reduce a contiguous copy permuted as "
                               "ReduceRequirements::permutation says");
  const ReduceConfig& c = prep.config;
  REDUCEKIT_RETURN_IF_ERROR(check_workspace(workspace, c.workspace_bytes, c.zeroed_bytes));

  ReduceLaunch l;
  l.config = c;
  l.out_numel = p.out_numel;
  l.x_type = x.dtype;
  l.double_accumulate = x.dtype == DType::kFloat64 || out.dtype == DType::kFloat64;
  kernels::ReduceArgs& a = l.args;
  a.x = x.data;
  a.outer = p.outer;
  a.reduced = p.reduced;
  a.inner = p.inner;
  a.outer_stride = p.outer_stride;
  a.reduced_stride = p.reduced_stride;
  a.aligned = c.aligned;
  a.outs.out = out.data;
  a.outs.out_type = out.dtype;
  a.outs.mean_out = reduce_op_has_mean_output(op) ? mean_out.data : nullptr;
  a.outs.mean_type = x.dtype;
  a.outs.mode = mode_of(op);
  a.outs.correction = correction;
  a.chunk = c.chunk;
  a.chunks = c.chunks;
  a.tiles = c.tiles;
  a.parts = c.parts;
  if (c.workspace_bytes > 0) {
    const WorkspaceRegions regions = workspace_regions(workspace, c.zeroed_bytes);
    a.tickets = static_cast<unsigned*>(regions.zeroed);
    a.partials = regions.rest;
  }
  return launch(op, l, stream);
}

namespace {
const TensorView kNoTensor{};
}  // namespace

Status sum(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kSum, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status mean(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kMean, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status prod(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kProd, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status amax(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kAmax, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status amin(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kAmin, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status argmax(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
              cudaStream_t stream) {
  return reduce(ReduceOp::kArgmax, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status argmin(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
              cudaStream_t stream) {
  return reduce(ReduceOp::kArgmin, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status logsumexp(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
                 cudaStream_t stream) {
  return reduce(ReduceOp::kLogsumexp, x, dims, keepdim, 0.0, out, kNoTensor, ws, stream);
}
Status var(const TensorView& x, DimList dims, double correction, bool keepdim, const TensorView& out, const Workspace& ws,
           cudaStream_t stream) {
  return reduce(ReduceOp::kVar, x, dims, keepdim, correction, out, kNoTensor, ws, stream);
}
Status std(const TensorView& x, DimList dims, double correction, bool keepdim, const TensorView& out, const Workspace& ws,
           cudaStream_t stream) {
  return reduce(ReduceOp::kStd, x, dims, keepdim, correction, out, kNoTensor, ws, stream);
}
Status var_mean(const TensorView& x, DimList dims, double correction, bool keepdim, const TensorView& var_out,
                const TensorView& mean_out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kVarMean, x, dims, keepdim, correction, var_out, mean_out, ws, stream);
}
Status std_mean(const TensorView& x, DimList dims, double correction, bool keepdim, const TensorView& std_out,
                const TensorView& mean_out, const Workspace& ws, cudaStream_t stream) {
  return reduce(ReduceOp::kStdMean, x, dims, keepdim, correction, std_out, mean_out, ws, stream);
}

}  // namespace reducekit
