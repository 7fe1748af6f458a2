// SPDX-License-Identifier: Apache-2.0
// Validation, planning and dtype dispatch shared by every op that maps rows to rows of the
// same shape (softmax family today; norms reuse it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "ops/checks.hpp"
#include "ops/row_launch.cuh"
#include "ops/row_split_launch.cuh"
#include "plan/reduction_plan.hpp"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/workspace.hpp"

namespace reducekit {

template <int NIN> struct RowwiseTensors {
  TensorView in[NIN];
  const char* in_name[NIN];
  TensorView out;
  const char* out_name;
};

namespace detail {

// The kernels of OpFor<T> (rowwise_launch.cuh), instantiated in a translation unit per op and
// dtype that CMake generates from rowwise.cu.in, so that they compile side by side; the entry
// points see only this declaration.
template <typename T, template <typename> class OpFor, int NIN>
Status dispatch_rowwise(const RowwiseTensors<NIN>& t, const RowwisePlan (&plans)[NIN + 1],
                        const RowKernelConfig& config, bool aligned, const RowSplitBuffers& split,
                        cudaStream_t stream);

// Device limits with the rowwise ops' settings (row_policy).
inline Status rowwise_limits(int elem_bytes, RowKernelLimits* limits) {
  *limits = row_policy(RowFamily::kRowwise, elem_bytes);
  return row_kernel_limits(limits);
}

// The rows of `v` over `dim`, which the kernels address directly or not at all.
inline Status plan_rowwise_rows(const TensorView& v, const char* name, int64_t dim, RowwisePlan* plan) {
  REDUCEKIT_RETURN_IF_ERROR(plan_rowwise(v, dim, plan));
  if (!plan->row_major)
    return Status::unsupported(std::string(name) +
                               ": the dim must be innermost (stride 1) with the other dims mergeable into rows;"
                               " make the tensor contiguous first");
  return Status::ok();
}

// sizeof(OpFor<T>::Stat) for x's dtype: the size of one chunk statistic in the workspace.
template <template <typename> class OpFor> std::size_t stat_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return sizeof(typename OpFor<__half>::Stat);
    case DType::kBFloat16: return sizeof(typename OpFor<__nv_bfloat16>::Stat);
    case DType::kFloat64: return sizeof(typename OpFor<double>::Stat);
    default: return sizeof(typename OpFor<float>::Stat);
  }
}

}  // namespace detail

// The workspace OpFor (a one-input op) needs over `dim` of x: nonzero only for rows the plan
// splits (see RowSplitConfig). Errors name `x_name`.
template <template <typename> class OpFor>
Status rowwise_workspace(const TensorView& x, const char* x_name, int64_t dim, RowSplitWorkspace* need) {
  *need = {};
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, x_name));
  RowwisePlan plan;
  REDUCEKIT_RETURN_IF_ERROR(detail::plan_rowwise_rows(x, x_name, dim, &plan));
  if (plan.rows == 0 || plan.cols == 0) return Status::ok();
  REDUCEKIT_RETURN_IF_ERROR(check_row_length(plan.cols, x_name));
  RowKernelLimits limits;
  const int elem_bytes = static_cast<int>(dtype_size(x.dtype));
  REDUCEKIT_RETURN_IF_ERROR(detail::rowwise_limits(elem_bytes, &limits));
  const RowKernelConfig config = plan_row_kernel(plan.cols, elem_bytes, 1, limits);
  *need = row_split_workspace(config, plan.rows, detail::stat_bytes<OpFor>(x.dtype));
  return Status::ok();
}

// Runs OpFor<T> over `dim` of the inputs, writing `out`. All tensors share shape and dtype.
// `workspace` (one-input ops only): where split rows keep their counters and chunk statistics
// (rowwise_workspace says how much); null, or a Workspace with neither data nor tickets, runs
// such rows on the stream kernel instead.
template <template <typename> class OpFor, int NIN>
Status run_rowwise(const RowwiseTensors<NIN>& t, int64_t dim, cudaStream_t stream,
                   const Workspace* workspace = nullptr) {
  for (int i = 0; i < NIN; ++i) {
    REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t.in[i], t.in_name[i]));
    if (i > 0) REDUCEKIT_RETURN_IF_ERROR(check_matches(t.in[i], t.in_name[i], t.in[0], t.in_name[0]));
  }
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t.out, t.out_name));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(t.out, t.out_name, t.in[0], t.in_name[0]));
  for (int i = 0; i < NIN; ++i)
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(t.out, t.out_name, t.in[i], t.in_name[i]));

  RowwisePlan plans[NIN + 1];
  for (int i = 0; i <= NIN; ++i) {
    const TensorView& v = i < NIN ? t.in[i] : t.out;
    const char* name = i < NIN ? t.in_name[i] : t.out_name;
    REDUCEKIT_RETURN_IF_ERROR(detail::plan_rowwise_rows(v, name, dim, &plans[i]));
  }
  REDUCEKIT_RETURN_IF_ERROR(check_output_rows(plans[NIN].rows, plans[NIN].cols, plans[NIN].row_stride, t.out_name));
  const int64_t rows = plans[0].rows, cols = plans[0].cols;
  if (rows == 0 || cols == 0) return Status::ok();
  REDUCEKIT_RETURN_IF_ERROR(check_row_length(cols, t.in_name[0]));

  // 16-byte accesses need every row start of every array aligned. The plan does not depend
  // on it (results stay batch-invariant); only how the kernel moves bytes does.
  const int elem_bytes = static_cast<int>(dtype_size(t.in[0].dtype));
  bool aligned = true;
  for (int i = 0; i <= NIN; ++i) {
    const TensorView& v = i < NIN ? t.in[i] : t.out;
    aligned = aligned && rows_on_granules(v.data, rows, plans[i].row_stride, elem_bytes);
  }
  RowKernelLimits limits;
  REDUCEKIT_RETURN_IF_ERROR(detail::rowwise_limits(elem_bytes, &limits));
  const RowKernelConfig config = plan_row_kernel(cols, elem_bytes, NIN, limits);

  RowSplitBuffers split;
  if (NIN == 1)
    REDUCEKIT_RETURN_IF_ERROR(split_buffers(workspace, config, rows, detail::stat_bytes<OpFor>(t.in[0].dtype), &split));

  switch (t.in[0].dtype) {
    case DType::kFloat32: return detail::dispatch_rowwise<float, OpFor>(t, plans, config, aligned, split, stream);
    case DType::kFloat16: return detail::dispatch_rowwise<__half, OpFor>(t, plans, config, aligned, split, stream);
    case DType::kBFloat16:
      return detail::dispatch_rowwise<__nv_bfloat16, OpFor>(t, plans, config, aligned, split, stream);
    case DType::kFloat64: return detail::dispatch_rowwise<double, OpFor>(t, plans, config, aligned, split, stream);
    default: return Status::invalid_argument(std::string(t.in_name[0]) + ": unsupported dtype");
  }
}

}  // namespace reducekit
