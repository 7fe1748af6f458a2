// SPDX-License-Identifier: Apache-2.0
// Reductions over any set of dims: sum, mean, prod, amax, amin, argmax, argmin, logsumexp,
// var, std, var_mean, std_mean, with torch's semantics. Tensors live on the current CUDA device;
// work is queued on `stream` with no host synchronization and no allocation, so calls are
// graph-capturable.
//
// Semantics (as torch's):
//   dims      DimList::all() is torch's dim=None; a list reduces those dims (negative wrap,
//             a repeat is an error). An empty list reduces nothing (each output is a set of one
//             element); torch's legacy "dim=[] means all" is the binding's business.
//   keepdim   reduced dims stay as size 1 in `out`'s shape.
//   dtypes    x: float32, float16, bfloat16 or float64. out: x's dtype, except argmax/argmin
//             (int64) and sum/mean (any float dtype: torch's `dtype=` argument). Accumulation
//             is float32, or float64 when x or out is float64.
//   values    NaN propagates; amax/amin of a set holding NaN is NaN, argmax/argmin point at its
//             first NaN; ties give the first index (row-major over the reduced dims).
//             Empty sets: sum 0, prod 1, mean NaN, logsumexp -inf, var/std NaN; amax, amin,
//             argmax, argmin of an empty set are kInvalidArgument naming the dim.
//   moments   var = M2 / (n - correction); n - correction <= 0 gives inf (M2 > 0) or NaN.
//             A set holding +-inf or NaN has variance NaN (as torch); the mean output of
//             var_mean/std_mean is the true mean, as mean() gives it (+-inf for one inf), where
//             torch.var_mean would return NaN.
//             Welford/Chan statistics on values shifted by the set's first element, so a large
//             mean against a small spread loses no accuracy.
//
// Results are deterministic (bit-identical across runs) and batch-invariant (an output does not
// depend on how many other outputs share the call): every combine runs in a fixed order that
// depends only on the reduced extent and the dtype, and no float atomics are used.
//
// Layout: x may be any strided view whose dims collapse into a row, column or all problem as it
// lies in memory (see src/plan/reduction_plan.hpp). Other layouts (e.g. dims {0, 2} of a
// contiguous [A, B, C]) make the op return kUnsupported without touching memory; then
// ReduceRequirements::needs_copy is true and the caller reduces a contiguous copy of x permuted by
// ReduceRequirements::permutation over its trailing dims instead (the PyTorch layer does this).
// `out` (and `mean_out`) must be contiguous and must not overlap x or each other.
//
// Workspace (CUB's convention): reduce_requirements() says how many bytes a call needs; the
// caller passes that much device memory (16-byte aligned). Its first `workspace_zeroed_bytes`
// hold completion tickets that must be zero when a call starts; every call leaves them zero
// again (the last CTA to use a ticket resets it), so a workspace zeroed once may be reused by
// later calls on the same stream (calls that may run concurrently need workspaces of their own).
// The tickets may also live apart (Workspace::tickets), e.g. one buffer per stream zeroed once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

enum class ReduceOp : int8_t {
  kSum, kMean, kProd, kAmax, kAmin, kArgmax, kArgmin, kLogsumexp, kVar, kStd, kVarMean, kStdMean,
};

const char* reduce_op_name(ReduceOp op);

// argmax / argmin: int64 indices, no gradient.
constexpr bool reduce_op_gives_indices(ReduceOp op) { return op == ReduceOp::kArgmax || op == ReduceOp::kArgmin; }
// var_mean / std_mean: a second output, mean_out.
constexpr bool reduce_op_has_mean_output(ReduceOp op) { return op == ReduceOp::kVarMean || op == ReduceOp::kStdMean; }

// torch's `dim` argument: every dim (dim=None), or `count` dims read from `dims`.
struct DimList {
  const int64_t* dims = nullptr;  // ignored when all is true
  int count = 0;
  bool all = false;

  static DimList every() { return DimList{nullptr, 0, true}; }
  static DimList of(const int64_t* dims, int count) { return DimList{dims, count, false}; }
};

// Caller-owned device scratch memory (reducekit/workspace.hpp), sized by reduce_requirements().

struct ReduceRequirements {
  int out_rank = 0;                  // the output's shape (keepdim applied)
  int64_t out_sizes[kMaxRank] = {};
  std::size_t workspace_bytes = 0;         // 0 when the call needs no workspace
  std::size_t workspace_zeroed_bytes = 0;  // prefix of the workspace that must be zero on entry
  // The op cannot read x's layout directly; reduce x.permute(permutation).contiguous() over its
  // last (x.rank - number of kept dims) dims instead. Sizes above still describe the real output.
  bool needs_copy = false;
  int permutation[kMaxRank] = {};
};

// Validates dims against x and says what a call of `op` needs. Errors name the argument
// ("dim: 3 is out of range ...", "dim: amax of an empty set ...").
Status reduce_requirements(ReduceOp op, const TensorView& x, DimList dims, bool keepdim,
                           ReduceRequirements* requirements);

// The generic entry point. `out` receives the op's result (var or std for var_mean/std_mean);
// `mean_out` is used by var_mean and std_mean only. `correction` is used by the moment ops only.
Status reduce(ReduceOp op, const TensorView& x, DimList dims, bool keepdim, double correction,
              const TensorView& out, const TensorView& mean_out, const Workspace& workspace,
              cudaStream_t stream);

// Named entry points, mirroring torch.
Status sum(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
           cudaStream_t stream);
Status mean(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
            cudaStream_t stream);
Status prod(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
            cudaStream_t stream);
Status amax(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
            cudaStream_t stream);
Status amin(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
            cudaStream_t stream);
Status argmax(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
              cudaStream_t stream);
Status argmin(const TensorView& x, DimList dims, bool keepdim, const TensorView& out, const Workspace& ws,
              cudaStream_t stream);
Status logsumexp(const TensorView& x, DimList dims, bool keepdim, const TensorView& out,
                 const Workspace& ws, cudaStream_t stream);
Status var(const TensorView& x, DimList dims, double correction, bool keepdim,
           const TensorView& out, const Workspace& ws, cudaStream_t stream);
Status std(const TensorView& x, DimList dims, double correction, bool keepdim,
           const TensorView& out, const Workspace& ws, cudaStream_t stream);
Status var_mean(const TensorView& x, DimList dims, double correction, bool keepdim,
                const TensorView& var_out, const TensorView& mean_out, const Workspace& ws,
                cudaStream_t stream);
Status std_mean(const TensorView& x, DimList dims, double correction, bool keepdim,
                const TensorView& std_out, const TensorView& mean_out, const Workspace& ws,
                cudaStream_t stream);

}  // namespace reducekit
