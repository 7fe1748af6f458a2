// SPDX-License-Identifier: Apache-2.0
// Validation, planning and launch of the softmax family over a non-innermost dim.
#include "ops/softmax_columns.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/softmax_columns.cuh"
#include "ops/checks.hpp"
#include "ops/launch.hpp"
#include "plan/launch_limits.hpp"
#include "plan/reduction_plan.hpp"
#include "plan/softmax_column_plan.hpp"
#include "reducekit/tuning.hpp"

namespace reducekit {
namespace {

template <SoftmaxColumnOp kOp, typename T> struct ColumnOpFor;
template <typename T> struct ColumnOpFor<SoftmaxColumnOp::kSoftmax, T> {
  using type = kernels::SoftmaxColumnForwardOp<T, false>;
};
template <typename T> struct ColumnOpFor<SoftmaxColumnOp::kLogSoftmax, T> {
  using type = kernels::SoftmaxColumnForwardOp<T, true>;
};
template <typename T> struct ColumnOpFor<SoftmaxColumnOp::kSoftmaxBackward, T> {
  using type = kernels::SoftmaxColumnBackwardOp<T, kernels::SoftmaxBackwardOp<T>>;
};
template <typename T> struct ColumnOpFor<SoftmaxColumnOp::kLogSoftmaxBackward, T> {
  using type = kernels::SoftmaxColumnBackwardOp<T, kernels::LogSoftmaxBackwardOp<T>>;
};

int inputs_of(SoftmaxColumnOp op) {
  return op == SoftmaxColumnOp::kSoftmax || op == SoftmaxColumnOp::kLogSoftmax ? 1 : 2;
}

using detail::launch_status;

// Statistic and parameter sizes of the op in x's dtype: the plan's shared-memory arithmetic.
template <SoftmaxColumnOp kOp> void op_sizes(DType dtype, int* stat_bytes, int* param_bytes) {
  const auto set = [&](auto tag) {
    using Op = typename ColumnOpFor<kOp, decltype(tag)>::type;
    *stat_bytes = static_cast<int>(sizeof(typename Op::Stat));
    *param_bytes = static_cast<int>(sizeof(typename Op::Params));
  };
  switch (dtype) {
    case DType::kFloat16: set(__half{}); break;
    case DType::kBFloat16: set(__nv_bfloat16{}); break;
    case DType::kFloat64: set(double{}); break;
    default: set(float{}); break;
  }
}

void op_sizes(SoftmaxColumnOp op, DType dtype, int* stat_bytes, int* param_bytes) {
  switch (op) {
    case SoftmaxColumnOp::kSoftmax: return op_sizes<SoftmaxColumnOp::kSoftmax>(dtype, stat_bytes, param_bytes);
    case SoftmaxColumnOp::kLogSoftmax: return op_sizes<SoftmaxColumnOp::kLogSoftmax>(dtype, stat_bytes, param_bytes);
    case SoftmaxColumnOp::kSoftmaxBackward:
      return op_sizes<SoftmaxColumnOp::kSoftmaxBackward>(dtype, stat_bytes, param_bytes);
    default: return op_sizes<SoftmaxColumnOp::kLogSoftmaxBackward>(dtype, stat_bytes, param_bytes);
  }
}

// The column plan for x over dim (wrapped), or *column = false where the row path decides.
Status plan_for(SoftmaxColumnOp op, const TensorView* tensors, int count, const char* name, int64_t dim,
                bool* column, SoftmaxColumnPlan* plan) {
  *column = false;
  RowwisePlan rows;
  REDUCEKIT_RETURN_IF_ERROR(plan_rowwise(tensors[0], dim, &rows));
  if (rows.row_major || rows.rows == 0 || rows.cols == 0) return Status::ok();
  const int d = static_cast<int>(dim < 0 ? dim + tensors[0].rank : dim);
  ColumnExtents ext;
  for (int i = 0; i < count; ++i) {
    ColumnExtents e;
    if (!dense_column_extents(tensors[i], d, &e)) return Status::ok();
    if (i == 0) ext = e;
  }
  DeviceAttributes device;
  REDUCEKIT_RETURN_IF_ERROR(current_device_attributes(&device));
  const int smem_optin = device.smem_optin;
  int stat_bytes = 0, param_bytes = 0;
  op_sizes(op, tensors[0].dtype, &stat_bytes, &param_bytes);
  SoftmaxColumnOverrides overrides;
  overrides.min_vectors = static_cast<int>(tuning("column_min_vectors").value_or(kColumnMinVectors));
  const auto bytes = [](const char* name, int64_t fallback) {
    return static_cast<std::size_t>(std::max<int64_t>(0, tuning(name).value_or(fallback)));
  };
  overrides.target_bytes = bytes("column_stage_target_bytes", kColumnStageTargetBytes);
  overrides.stage_max_bytes = bytes("column_stage_max_bytes", 0);  // 0: the plan's default
  overrides.max_split = static_cast<int>(tuning("column_max_split").value_or(kColumnMaxSplit));
  overrides.wide_vectors = static_cast<int>(tuning("column_wide_vectors").value_or(0));  // 0: the plan's default
  REDUCEKIT_RETURN_IF_ERROR(plan_softmax_columns(ext, static_cast<int>(dtype_size(tensors[0].dtype)), inputs_of(op),
                                                 stat_bytes, param_bytes, static_cast<std::size_t>(smem_optin),
                                                 plan, overrides));
  *column = true;
  return Status::ok();
}

template <class Op, typename T, bool kStaged, bool kVector>
Status launch(const kernels::ColumnArgs<T>& a, const SoftmaxColumnPlan& plan, cudaStream_t stream) {
  const auto kernel = kernels::softmax_column_kernel<Op, T, kStaged, kVector>;
  if (plan.smem_bytes > 48 * 1024 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem_bytes)) !=
          cudaSuccess)
    return launch_status("softmax_column_kernel (shared memory opt-in)");
  // One CTA a tile; with two tile buffers as many CTAs as stay resident, each looping over tiles
  // (a tile's copy beside the one before it). Two buffers only where they cost no resident CTA:
  // they gain where they do not and lose where a CTA an SM goes (LOG.md; column_stage_buffers=2
  // takes them wherever they fit, =1 never). Which CTA takes a tile, and how many buffers it
  // has, changes no arithmetic. A split tile's CTAs are a cluster, so the grid counts whole
  // clusters.
  kernels::ColumnArgs<T> args = a;
  std::size_t smem = plan.smem_bytes;
  const int split = plan.split;
  int64_t grid = std::min(a.items, kMaxGridX / split) * split;
  if (plan.buffers == 2) {
    const int64_t forced = tuning("column_stage_buffers").value_or(0);
    const void* k = reinterpret_cast<const void*>(kernel);
    int two = 0, one = 0;
    REDUCEKIT_RETURN_IF_ERROR(detail::resident_ctas(k, kColumnSoftmaxThreads, smem, &two));
    REDUCEKIT_RETURN_IF_ERROR(detail::resident_ctas(k, kColumnSoftmaxThreads, smem - plan.tile_bytes, &one));
    if (forced == 1 || (forced != 2 && two < one)) {
      args.buffers = 1;
      smem -= plan.tile_bytes;
    } else {
      grid = std::min<int64_t>(a.items, std::max(two / split, 1)) * split;
    }
  }
  if (split == 1) {
    kernel<<<static_cast<unsigned>(grid), kColumnSoftmaxThreads, smem, stream>>>(args);
    return launch_status("softmax_column_kernel");
  }
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {static_cast<unsigned>(split), 1, 1};
  return detail::launch_with_attribute(kernel, grid, kColumnSoftmaxThreads, smem, stream, cluster,
                                       "softmax_column_kernel (split tiles)", args);
}

template <SoftmaxColumnOp kOp, typename T>
Status dispatch(const TensorView* in, const TensorView& out, const SoftmaxColumnPlan& plan, cudaStream_t stream) {
  using Op = typename ColumnOpFor<kOp, T>::type;
  constexpr int NIN = Op::kInputs;
  kernels::ColumnArgs<T> a{};
  bool vector = plan.ext.inner % plan.vec == 0 && reinterpret_cast<uintptr_t>(out.data) % 16 == 0;
  for (int i = 0; i < NIN; ++i) {
    a.in[i] = static_cast<const T*>(in[i].data);
    vector = vector && reinterpret_cast<uintptr_t>(in[i].data) % 16 == 0;
  }
  a.out = static_cast<T*>(out.data);
  a.reduced = plan.ext.reduced;
  a.inner = plan.ext.inner;
  a.tiles_per_slab = plan.tiles_per_slab;
  a.items = plan.tiles;
  a.col_vectors = plan.col_vectors;
  a.k_lanes = plan.k_lanes;
  a.buffers = plan.buffers;
  a.split = plan.split;
  a.band = plan.band;
  if (plan.staged)
    return vector ? launch<Op, T, true, true>(a, plan, stream) : launch<Op, T, true, false>(a, plan, stream);
  return vector ? launch<Op, T, false, true>(a, plan, stream) : launch<Op, T, false, false>(a, plan, stream);
}

template <SoftmaxColumnOp kOp>
Status dispatch_dtype(const TensorView* in, const TensorView& out, const SoftmaxColumnPlan& plan, cudaStream_t stream) {
  switch (in[0].dtype) {
    case DType::kFloat32: return dispatch<kOp, float>(in, out, plan, stream);
    case DType::kFloat16: return dispatch<kOp, __half>(in, out, plan, stream);
    case DType::kBFloat16: return dispatch<kOp, __nv_bfloat16>(in, out, plan, stream);
    case DType::kFloat64: return dispatch<kOp, double>(in, out, plan, stream);
    default: return Status::invalid_argument("x: unsupported dtype");
  }
}

}  // namespace

Status softmax_columns_route(const TensorView& x, const char* name, int64_t dim, bool* column) {
  SoftmaxColumnPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, name));
  return plan_for(SoftmaxColumnOp::kSoftmax, &x, 1, name, dim, column, &plan);
}

Status run_softmax_columns(SoftmaxColumnOp op, const TensorView* in, const char* const* in_names,
                           const TensorView& out, const char* out_name, int64_t dim, cudaStream_t stream,
                           bool* handled) {
  *handled = false;
  const int nin = inputs_of(op);
  for (int i = 0; i < nin; ++i) {
    REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(in[i], in_names[i]));
    if (i > 0) REDUCEKIT_RETURN_IF_ERROR(check_matches(in[i], in_names[i], in[0], in_names[0]));
  }
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(out, out_name));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(out, out_name, in[0], in_names[0]));
  for (int i = 0; i < nin; ++i) REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(out, out_name, in[i], in_names[i]));

  const TensorView tensors[3] = {in[0], nin > 1 ? in[1] : out, out};
  bool column = false;
  SoftmaxColumnPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_for(op, tensors, nin + 1, in_names[0], dim, &column, &plan));
  if (!column) return Status::ok();
  *handled = true;
  switch (op) {
    case SoftmaxColumnOp::kSoftmax: return dispatch_dtype<SoftmaxColumnOp::kSoftmax>(in, out, plan, stream);
    case SoftmaxColumnOp::kLogSoftmax: return dispatch_dtype<SoftmaxColumnOp::kLogSoftmax>(in, out, plan, stream);
    case SoftmaxColumnOp::kSoftmaxBackward:
      return dispatch_dtype<SoftmaxColumnOp::kSoftmaxBackward>(in, out, plan, stream);
    default: return dispatch_dtype<SoftmaxColumnOp::kLogSoftmaxBackward>(in, out, plan, stream);
  }
}

}  // namespace reducekit
