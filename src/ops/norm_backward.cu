// layer_norm and rms_norm backward: dx through the row engine (one pass over x and dy with the
// saved mean/rstd), dweight/dbias through the two-stage column kernels of norm_ops.cuh.
#include <algorithm>

#include "ops/norm_launch.cuh"

namespace reducekit {
namespace norm_detail {
namespace {

// Rows per partial row of dweight/dbias: fixed, growing only to keep the grid's y extent legal.
int64_t param_grad_rows_per_block(int64_t rows) {
  int64_t per = kernels::kParamGradRowsPerBlock;
  while ((rows + per - 1) / per > 65535) per *= 2;
  return per;
}

std::size_t param_grad_bytes(int64_t rows, int64_t cols, DType x) {
  if (rows == 0 || cols == 0) return 0;
  const int64_t blocks = (rows + param_grad_rows_per_block(rows) - 1) / param_grad_rows_per_block(rows);
  const std::size_t bytes = std::size_t(2) * blocks * cols * dtype_size(stat_dtype(x));
  return (bytes + 15) / 16 * 16;
}

struct BackwardCall {
  const TensorView* dy;
  const TensorView* x;
  NormShape shape;
  const TensorView* mean;  // null for rms_norm
  const TensorView* rstd;
  const TensorView* weight;
  const TensorView* dx;
  const TensorView* dweight;
  const TensorView* dbias;
  Workspace workspace;
};

template <typename T, typename P>
Status launch_param_grads(const BackwardCall& c, const RowwisePlan& px, const RowwisePlan& pdy, bool aligned,
                          cudaStream_t stream) {
  using Acc = kernels::acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  kernels::ParamGradArgs<T> a;
  a.x = static_cast<const T*>(c.x->data);
  a.dy = static_cast<const T*>(c.dy->data);
  a.x_stride = px.row_stride;
  a.dy_stride = pdy.row_stride;
  a.mean = c.mean != nullptr ? static_cast<const Acc*>(c.mean->data) : nullptr;
  a.rstd = static_cast<const Acc*>(c.rstd->data);
  a.rows = px.rows;
  a.cols = static_cast<int>(px.cols);
  a.rows_per_block = param_grad_rows_per_block(a.rows);
  a.blocks = (a.rows + a.rows_per_block - 1) / a.rows_per_block;
  a.partial = static_cast<Acc*>(c.workspace.data);
  const dim3 grid(static_cast<unsigned>((a.cols + 32 * VEC - 1) / (32 * VEC)), static_cast<unsigned>(a.blocks));
  if (aligned) {
    kernels::norm_param_grad_partial_kernel<T, VEC, true><<<grid, kernels::kParamGradWarps * 32, 0, stream>>>(a);
  } else {
    kernels::norm_param_grad_partial_kernel<T, VEC, false><<<grid, kernels::kParamGradWarps * 32, 0, stream>>>(a);
  }
  REDUCEKIT_RETURN_IF_ERROR(detail::launch_status("norm_param_grad_partial_kernel"));
  P* dw = c.dweight != nullptr ? static_cast<P*>(c.dweight->data) : nullptr;
  P* db = c.dbias != nullptr ? static_cast<P*>(c.dbias->data) : nullptr;
  kernels::norm_param_grad_finish_kernel<Acc, P>
      <<<static_cast<unsigned>((a.cols + 255) / 256), 256, 0, stream>>>(a.partial, a.blocks, a.cols, dw, db);
  return detail::launch_status("norm_param_grad_finish_kernel");
}

template <typename T, bool kLayer>
Status launch_backward(const BackwardCall& c, const RowwisePlan (&plans)[3], bool params_f32, bool aligned,
                       cudaStream_t stream) {
  using Acc = kernels::acc_t<T>;
  // dweight/dbias first: they read x and dy, which dx may overwrite (in-place dx).
  if (c.dweight != nullptr || c.dbias != nullptr) {
    const TensorView* p = c.dweight != nullptr ? c.dweight : c.dbias;
    Status s;
    if constexpr (sizeof(T) == 2) {  // only 16-bit x may have float32 parameters
      s = p->dtype == DType::kFloat32 ? launch_param_grads<T, float>(c, plans[0], plans[1], aligned, stream)
                                      : launch_param_grads<T, T>(c, plans[0], plans[1], aligned, stream);
    } else {
      s = launch_param_grads<T, T>(c, plans[0], plans[1], aligned, stream);
    }
    REDUCEKIT_RETURN_IF_ERROR(s);
  }
  if (c.dx == nullptr) return Status::ok();
  using Op = kernels::NormBackwardOp<T, kLayer>;
  const void* in[2] = {c.x->data, c.dy->data};
  const kernels::RowArgs<T, 2> args = row_args<T, 2>(in, plans, c.dx->data, plans[2]);
  kernels::NormExtra<T> extra;
  extra.weight = c.weight != nullptr ? c.weight->data : nullptr;
  extra.params_f32 = params_f32;
  extra.saved_mean = c.mean != nullptr ? static_cast<const Acc*>(c.mean->data) : nullptr;
  extra.saved_rstd = static_cast<const Acc*>(c.rstd->data);
  RowKernelLimits limits;
  REDUCEKIT_RETURN_IF_ERROR(row_kernel_limits(&limits));
  const RowKernelConfig config = plan_row_kernel(args.cols, static_cast<int>(sizeof(T)), 2, limits);
  return launch_row_op<T, Op>(args, extra, config, aligned, stream);
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
  const bool want_param_grads = c.dweight != nullptr || c.dbias != nullptr;
  if (want_param_grads) {
    const std::size_t need = param_grad_bytes(rows, cols, x.dtype);
    if (c.workspace.bytes < need || (need > 0 && c.workspace.data == nullptr))
      return Status::invalid_argument("workspace: needs " + std::to_string(need) + " bytes, got " +
                                      std::to_string(c.workspace.data == nullptr ? 0 : c.workspace.bytes));
    if (reinterpret_cast<uintptr_t>(c.workspace.data) % 16 != 0)
      return Status::invalid_argument("workspace: must be 16-byte aligned");
  }
  if (cols == 0) return Status::ok();
  if (cols > kMaxRowLength)
    return Status::unsupported("x: rows longer than " + std::to_string(kMaxRowLength) + " elements are not supported");
  if (rows == 0) {  // sums over no rows
    for (const TensorView* g : grads)
      if (g != nullptr && cudaMemsetAsync(g->data, 0, g->numel() * dtype_size(g->dtype), stream) != cudaSuccess)
        return detail::launch_status("cudaMemsetAsync");
    return Status::ok();
  }

  const int vec = 16 / static_cast<int>(dtype_size(x.dtype));
  bool aligned = aligned_ptr(c.weight);
  for (int i = 0; i < 3; ++i) aligned = aligned && aligned_rows(views[i]->data, plans[i], vec);
  switch (x.dtype) {
    case DType::kFloat32: return launch_backward<float, kLayer>(c, plans, params_f32, aligned, stream);
    case DType::kFloat16: return launch_backward<__half, kLayer>(c, plans, params_f32, aligned, stream);
    case DType::kBFloat16: return launch_backward<__nv_bfloat16, kLayer>(c, plans, params_f32, aligned, stream);
    case DType::kFloat64: return launch_backward<double, kLayer>(c, plans, params_f32, aligned, stream);
    default: return Status::invalid_argument("x: unsupported dtype");
  }
}

}  // namespace
}  // namespace norm_detail

Status norm_backward_workspace_bytes(const TensorView& x, const NormShape& normalized_shape, std::size_t* bytes) {
  if (bytes == nullptr) return Status::invalid_argument("bytes: is null");
  if (x.rank < 0 || x.rank > kMaxRank)
    return Status::invalid_argument("x: rank " + std::to_string(x.rank) + " is outside 0.." + std::to_string(kMaxRank));
  REDUCEKIT_RETURN_IF_ERROR(norm_detail::check_normalized_shape(x, normalized_shape));
  int64_t cols = 1, rows = 1;
  for (int d = 0; d < x.rank; ++d) (d >= x.rank - normalized_shape.rank ? cols : rows) *= x.sizes[d];
  *bytes = norm_detail::param_grad_bytes(rows, cols, x.dtype);
  return Status::ok();
}

Status layer_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                           const TensorView& mean, const TensorView& rstd, const TensorView* weight,
                           const TensorView* dx, const TensorView* dweight, const TensorView* dbias,
                           Workspace workspace, cudaStream_t stream) {
  return norm_detail::run_backward<true>(
      {&dy, &x, normalized_shape, &mean, &rstd, weight, dx, dweight, dbias, workspace}, stream);
}

Status rms_norm_backward(const TensorView& dy, const TensorView& x, const NormShape& normalized_shape,
                         const TensorView& rstd, const TensorView* weight, const TensorView* dx,
                         const TensorView* dweight, Workspace workspace, cudaStream_t stream) {
  return norm_detail::run_backward<false>(
      {&dy, &x, normalized_shape, nullptr, &rstd, weight, dx, dweight, nullptr, workspace}, stream);
}

}  // namespace reducekit
