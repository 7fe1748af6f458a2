// SPDX-License-Identifier: Apache-2.0
// layer_norm and rms_norm backward. Rows that fit the fused kernel (norm_backward_plan.hpp:
// several short rows a CTA, or one row a CTA) take one pass over x and dy for dx and the
// dweight/dbias partials (kernels/norm_backward_fused.cuh), then a small kernel sums the partial
// rows. Longer rows take the two-kernel path: dx through the row engine, dweight/dbias through
// the two-stage column kernels of norm_ops.cuh (a second read of x and dy).
#include "ops/norm_backward_launch.cuh"

namespace reducekit {
namespace norm_detail {
namespace {

Status fused_groups_for(DType x, const FusedNormBackwardLayout& l, int64_t rows, int64_t* groups) {
  switch (x) {
    case DType::kFloat32: return NormBackwardKernels<float>::groups(l, rows, groups);
    case DType::kFloat16: return NormBackwardKernels<__half>::groups(l, rows, groups);
    case DType::kBFloat16: return NormBackwardKernels<__nv_bfloat16>::groups(l, rows, groups);
    case DType::kFloat64: return NormBackwardKernels<double>::groups(l, rows, groups);
    default: return Status::invalid_argument("x: unsupported dtype");
  }
}

// Workspace of a call computing dweight/dbias: the fused path's [2][G][cols] partial rows (one
// a CTA, whatever its R), or the two-kernel path's [2][blocks][cols].
Status param_grad_bytes(int64_t rows, int64_t cols, DType x, std::size_t* bytes) {
  *bytes = 0;
  if (x != DType::kFloat32 && x != DType::kFloat16 && x != DType::kBFloat16 && x != DType::kFloat64)
    return Status::invalid_argument(std::string("x: unsupported dtype ") + dtype_name(x));
  if (rows == 0 || cols == 0 || cols > kMaxRowLength) return Status::ok();
  const FusedNormBackwardLayout l = fused_layout(cols, static_cast<int>(dtype_size(x)));
  int64_t partial_rows = 0;
  if (l.fused) {
    REDUCEKIT_RETURN_IF_ERROR(fused_groups_for(x, l, rows, &partial_rows));
  } else {
    partial_rows = (rows + param_grad_rows_per_block(rows) - 1) / param_grad_rows_per_block(rows);
  }
  const std::size_t b = std::size_t(2) * partial_rows * cols * dtype_size(stat_dtype(x));
  *bytes = (b + 15) / 16 * 16;
  return Status::ok();
}

template <bool kLayer> Status run_backward(const BackwardCall& c, cudaStream_t stream) {
  const TensorView& x = *c.x;
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_normalized_shape(x, c.shape));
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(*c.dy, "dy"));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(*c.dy, "dy", x, "x"));
  bool params_f32 = false;
  if (c.weight != nullptr) {
    REDUCEKIT_RETURN_IF_ERROR(check_column_tensor(*c.weight, "weight", x, c.shape));
    params_f32 = c.weight->dtype != x.dtype;
  }
  if (c.dx != nullptr) {
    REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(*c.dx, "dx"));
    REDUCEKIT_RETURN_IF_ERROR(check_matches(*c.dx, "dx", x, "x"));
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.dx, "dx", x, "x"));
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.dx, "dx", *c.dy, "dy"));
  }
  const TensorView* grads[2] = {c.dweight, c.dbias};
  const char* grad_names[2] = {"dweight", "dbias"};
  for (int i = 0; i < 2; ++i) {
    if (grads[i] == nullptr) continue;
    REDUCEKIT_RETURN_IF_ERROR(check_column_tensor(*grads[i], grad_names[i], x, c.shape));
    if (c.weight != nullptr && grads[i]->dtype != c.weight->dtype)
      return Status::invalid_argument(std::string(grad_names[i]) + ": dtype " + dtype_name(grads[i]->dtype) +
                                      " differs from weight's " + dtype_name(c.weight->dtype));
  }
  if (c.dweight != nullptr && c.dbias != nullptr && c.dweight->dtype != c.dbias->dtype)
    return Status::invalid_argument(std::string("dbias: dtype ") + dtype_name(c.dbias->dtype) +
                                    " differs from dweight's " + dtype_name(c.dweight->dtype));

  RowwisePlan plans[3];
  const TensorView* views[3] = {c.x, c.dy, c.dx != nullptr ? c.dx : c.x};
  const char* names[3] = {"x", "dy", "dx"};
  for (int i = 0; i < 3; ++i) REDUCEKIT_RETURN_IF_ERROR(plan_norm_rows(*views[i], names[i], c.shape.rank, &plans[i]));
  const int64_t rows = plans[0].rows, cols = plans[0].cols;
  if (c.mean != nullptr) REDUCEKIT_RETURN_IF_ERROR(check_stat_tensor(*c.mean, "mean", x, rows));
  REDUCEKIT_RETURN_IF_ERROR(check_stat_tensor(*c.rstd, "rstd", x, rows));
  if (c.dx != nullptr)
    REDUCEKIT_RETURN_IF_ERROR(check_output_rows(plans[2].rows, plans[2].cols, plans[2].row_stride, "dx"));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{c.dx, "dx"}, {c.dweight, "dweight"}, {c.dbias, "dbias"}},
                                           {{c.weight, "weight"}, {c.mean, "mean"}, {c.rstd, "rstd"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{c.dweight, "dweight"}, {c.dbias, "dbias"}}, {{c.x, "x"}, {c.dy, "dy"}}));
  const bool want_param_grads = c.dweight != nullptr || c.dbias != nullptr;
  if (want_param_grads) {
    std::size_t need = 0;
    REDUCEKIT_RETURN_IF_ERROR(param_grad_bytes(rows, cols, x.dtype, &need));
    if (c.workspace.bytes < need || (need > 0 && c.workspace.data == nullptr))
      return Status::invalid_argument("workspace: needs " + std::to_string(need) + " bytes, got " +
                                      std::to_string(c.workspace.data == nullptr ? 0 : c.workspace.bytes));
    if (reinterpret_cast<uintptr_t>(c.workspace.data) % 16 != 0)
      return Status::invalid_argument("workspace: must be 16-byte aligned");
  }
  if (cols == 0) return Status::ok();
  REDUCEKIT_RETURN_IF_ERROR(check_row_length(cols, "x"));
  if (rows == 0) {  // sums over no rows
    for (const TensorView* g : grads)
      if (g != nullptr && cudaMemsetAsync(g->data, 0, g->numel() * dtype_size(g->dtype), stream) != cudaSuccess)
        return detail::launch_status("cudaMemsetAsync");
    return Status::ok();
  }

  const int elem_bytes = static_cast<int>(dtype_size(x.dtype));
  bool aligned = aligned_ptr(c.weight);
  for (int i = 0; i < 3; ++i)
    aligned = aligned && rows_on_granules(views[i]->data, plans[i].rows, plans[i].row_stride, elem_bytes);
  switch (x.dtype) {
    case DType::kFloat32: return NormBackwardKernels<float>::launch(c, plans, kLayer, params_f32, aligned, stream);
    case DType::kFloat16: return NormBackwardKernels<__half>::launch(c, plans, kLayer, params_f32, aligned, stream);
    case DType::kBFloat16:
      return NormBackwardKernels<__nv_bfloat16>::launch(c, plans, kLayer, params_f32, aligned, stream);
    case DType::kFloat64: return NormBackwardKernels<double>::launch(c, plans, kLayer, params_f32, aligned, stream);
    default: return Status::invalid_argument("x: unsupported dtype");
  }
}

}  // namespace
}  // namespace norm_detail

Status norm_backward_requirements(const TensorView& x, const NormShape& normalized_shape,
                                  NormRequirements* requirements) {
  if (requirements == nullptr) return Status::invalid_argument("requirements: must not be null");
  *requirements = {};
  if (x.rank < 0 || x.rank > kMaxRank)
    return Status::invalid_argument("x: rank " + std::to_string(x.rank) + " is outside 0.." + std::to_string(kMaxRank));
  // Asked without a device tensor check, so the sizes are checked here: a negative one would
  // make the row count, and with it the byte count, negative.
  for (int d = 0; d < x.rank; ++d)
    if (x.sizes[d] < 0) return Status::invalid_argument("x: negative size in " + shape_string(x));
  REDUCEKIT_RETURN_IF_ERROR(norm_detail::check_normalized_shape(x, normalized_shape));
  int64_t cols = 1, rows = 1;
  for (int d = 0; d < x.rank; ++d) (d >= x.rank - normalized_shape.rank ? cols : rows) *= x.sizes[d];
  return norm_detail::param_grad_bytes(rows, cols, x.dtype, &requirements->workspace_bytes);
}

Status layer_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                           const TensorView& mean, const TensorView& rstd, const TensorView* weight,
                           const TensorView* dx, const TensorView* dweight, const TensorView* dbias,
                           const Workspace& workspace, cudaStream_t stream) {
  return norm_detail::run_backward<true>(
      {&dy, &x, normalized_shape, &mean, &rstd, weight, dx, dweight, dbias, workspace}, stream);
}

Status rms_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                         const TensorView& rstd, const TensorView* weight, const TensorView* dx,
                         const TensorView* dweight, const TensorView* dbias, const Workspace& workspace,
                         cudaStream_t stream) {
  return norm_detail::run_backward<false>(
      {&dy, &x, normalized_shape, nullptr, &rstd, weight, dx, dweight, dbias, workspace}, stream);
}

Status rms_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                         const TensorView& rstd, const TensorView* weight, const TensorView* dx,
                         const TensorView* dweight, const Workspace& workspace, cudaStream_t stream) {
  return rms_norm_backward(dy, x, normalized_shape, rstd, weight, dx, dweight, nullptr, workspace, stream);
}

}  // namespace reducekit
