// SPDX-License-Identifier: Apache-2.0
// Validation, row planning and dtype dispatch shared by the layer_norm / rms_norm entry points
// (layer_norm.cu, rms_norm.cu, add_layer_norm.cu, add_rms_norm.cu; norm_backward.cu). The forward
// kernels' launches: norm_forward_launch.cuh; math: kernels/norm_ops.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/norm_ops.cuh"
#include "kernels/norm_staged.cuh"
#include "ops/checks.hpp"
#include "ops/row_launch.cuh"
#include "ops/row_split_launch.cuh"
#include "plan/reduction_plan.hpp"
#include "plan/row_kernel_plan.hpp"
#include "reducekit/norm.hpp"

namespace reducekit::norm_detail {

inline std::string sizes_string(const int64_t* sizes, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
  return s + "]";
}

inline bool is_16bit(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }
inline DType stat_dtype(DType x) { return x == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// normalized_shape must name 1 .. rank(x) trailing dims of x exactly.
inline Status check_normalized_shape(const TensorView& x, const NormShape& s) {
  if (s.rank < 1 || s.rank > x.rank)
    return Status::invalid_argument("normalized_shape: expected 1 to " + std::to_string(x.rank) +
                                    " dims (x has rank " + std::to_string(x.rank) + "), got " +
                                    std::to_string(s.rank));
  for (int i = 0; i < s.rank; ++i)
    if (s.sizes[i] != x.sizes[x.rank - s.rank + i])
      return Status::invalid_argument("normalized_shape: " + sizes_string(s.sizes, s.rank) +
                                      " does not match the trailing dims of x, whose shape is " +
                                      sizes_string(x.sizes, x.rank));
  return Status::ok();
}

// weight, bias, dweight, dbias: normalized_shape, contiguous, x's device, x's dtype or float32
// for 16-bit x.
inline Status check_column_tensor(const TensorView& t, const char* name, const TensorView& x, const NormShape& s) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t, name));
  if (t.device != x.device)
    return Status::invalid_argument(std::string(name) + ": on device " + std::to_string(t.device) +
                                    " but x is on device " + std::to_string(x.device));
  if (t.dtype != x.dtype && !(is_16bit(x.dtype) && t.dtype == DType::kFloat32))
    return Status::invalid_argument(std::string(name) + ": dtype " + dtype_name(t.dtype) + " must be x's (" +
                                    dtype_name(x.dtype) + ")" + (is_16bit(x.dtype) ? " or float32" : ""));
  bool same = t.rank == s.rank;
  for (int d = 0; same && d < t.rank; ++d) same = t.sizes[d] == s.sizes[d];
  if (!same)
    return Status::invalid_argument(std::string(name) + ": shape " + sizes_string(t.sizes, t.rank) +
                                    " does not match normalized_shape " + sizes_string(s.sizes, s.rank));
  if (!t.is_contiguous()) return Status::unsupported(std::string(name) + ": must be contiguous");
  return Status::ok();
}

// mean / rstd: one value per row, contiguous, float32 (float64 for float64 x).
inline Status check_stat_tensor(const TensorView& t, const char* name, const TensorView& x, int64_t rows) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t, name));
  if (t.device != x.device)
    return Status::invalid_argument(std::string(name) + ": on device " + std::to_string(t.device) +
                                    " but x is on device " + std::to_string(x.device));
  if (t.dtype != stat_dtype(x.dtype))
    return Status::invalid_argument(std::string(name) + ": dtype " + dtype_name(t.dtype) + " must be " +
                                    dtype_name(stat_dtype(x.dtype)) + " for " + dtype_name(x.dtype) + " x");
  if (t.numel() != rows)
    return Status::invalid_argument(std::string(name) + ": has " + std::to_string(t.numel()) + " elements, expected " +
                                    std::to_string(rows) + " (one per row)");
  if (!t.is_contiguous()) return Status::unsupported(std::string(name) + ": must be contiguous");
  return Status::ok();
}

// Rows of an x-shaped tensor: its normalized (last k) dims must be dense, and the leading
// dims must merge into one row index. A tensor with no elements is read and written nowhere, so
// its strides do not matter (torch gives a [2, 0] tensor the strides [1, 1], and a slice of no
// rows keeps its base's steps; a contiguous() copy of either keeps them too): it plans as dense.
inline Status plan_norm_rows(const TensorView& t, const char* name, int k, RowwisePlan* plan) {
  TensorView v = t;
  const bool empty = t.numel() == 0;
  int64_t expected = 1, cols = 1;
  for (int d = t.rank - 1; d >= t.rank - k; --d) {
    if (!empty && t.sizes[d] != 1 && t.strides[d] != expected)
      return Status::unsupported(std::string(name) +
                                 ": the normalized dims must be dense (stride 1 innermost); make the tensor "
                                 "contiguous first");
    expected *= t.sizes[d];
    cols *= t.sizes[d];
  }
  v.rank = t.rank - k + 1;
  v.sizes[v.rank - 1] = cols;
  v.strides[v.rank - 1] = 1;
  REDUCEKIT_RETURN_IF_ERROR(plan_rowwise(v, v.rank - 1, plan));
  if (!plan->row_major)
    return Status::unsupported(std::string(name) +
                               ": the leading dims must merge into one row index; make the tensor contiguous first");
  return Status::ok();
}

inline bool aligned_ptr(const TensorView* t) {
  return t == nullptr || reinterpret_cast<uintptr_t>(t->data) % 16 == 0;
}

template <typename Acc> Status fill_stat(const TensorView* t, int64_t n, Acc value, cudaStream_t stream) {
  if (t == nullptr || n == 0) return Status::ok();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 1024);
  kernels::fill_kernel<Acc><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<Acc*>(t->data), n, value);
  return detail::launch_status("fill_kernel");
}

// Everything a forward call names; residual and sum are null without the fused add.
struct ForwardCall {
  const TensorView* x;
  const TensorView* residual;
  NormShape shape;
  const TensorView* weight;
  const TensorView* bias;
  double eps;
  const TensorView* y;
  const TensorView* sum;
  const TensorView* mean;
  const TensorView* rstd;
  const Workspace* workspace = nullptr;  // split rows' counters and statistics (none: stream kernel)
};

// One op's forward kernels for one element type (norm_forward_launch.cuh), instantiated in a
// translation unit per op and dtype that CMake generates from norm_forward.cu.in, so that the 24
// compile side by side; the entry points see only this declaration.
template <template <typename, bool> class OpFor, bool kResidual, typename T>
Status launch_forward(const ForwardCall& c, const RowwisePlan (&plans)[4], bool params_f32,
                      const RowKernelConfig& config, bool aligned, cudaStream_t stream);

// The row family (policy) of a forward op.
template <template <typename, bool> class OpFor, bool kResidual>
constexpr RowFamily kForwardFamily =
    kResidual ? (std::is_same_v<OpFor<float, false>, kernels::LayerNormForwardOp<float, false>>
                     ? RowFamily::kResidualLayerNormForward
                     : RowFamily::kResidualRmsNormForward)
    : std::is_same_v<OpFor<float, false>, kernels::LayerNormForwardOp<float, false>>   ? RowFamily::kLayerNormForward
    : std::is_same_v<OpFor<float, false>, kernels::RmsNormBiasForwardOp<float, false>> ? RowFamily::kRmsNormBiasForward
                                                                                        : RowFamily::kRmsNormForward;

// The plan of a forward call's rows: depends on the op, the row length and the dtype only.
template <template <typename, bool> class OpFor, bool kResidual>
Status forward_config(int64_t cols, int elem_bytes, RowKernelConfig* config) {
  RowKernelLimits limits = row_policy(kForwardFamily<OpFor, kResidual>, elem_bytes);
  REDUCEKIT_RETURN_IF_ERROR(row_kernel_limits(&limits));
  *config = plan_row_kernel(cols, elem_bytes, kResidual ? 2 : 1, limits);
  return Status::ok();
}

template <template <typename, bool> class OpFor, bool kResidual> std::size_t forward_stat_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return sizeof(typename OpFor<__half, kResidual>::Stat);
    case DType::kBFloat16: return sizeof(typename OpFor<__nv_bfloat16, kResidual>::Stat);
    case DType::kFloat64: return sizeof(typename OpFor<double, kResidual>::Stat);
    default: return sizeof(typename OpFor<float, kResidual>::Stat);
  }
}

// The workspace a forward call over x needs (its split rows' counters and chunk statistics).
template <template <typename, bool> class OpFor, bool kResidual>
Status forward_requirements(const TensorView& x, const NormShape& shape, NormRequirements* requirements) {
  if (requirements == nullptr) return Status::invalid_argument("requirements: must not be null");
  *requirements = {};
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_normalized_shape(x, shape));
  RowwisePlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_norm_rows(x, "x", shape.rank, &plan));
  if (plan.rows == 0 || plan.cols == 0) return Status::ok();
  REDUCEKIT_RETURN_IF_ERROR(check_row_length(plan.cols, "x"));
  RowKernelConfig config;
  REDUCEKIT_RETURN_IF_ERROR((forward_config<OpFor, kResidual>(plan.cols, static_cast<int>(dtype_size(x.dtype)), &config)));
  const RowSplitWorkspace need = row_split_workspace(config, plan.rows, forward_stat_bytes<OpFor, kResidual>(x.dtype));
  requirements->workspace_bytes = need.bytes;
  requirements->workspace_zeroed_bytes = need.zeroed_bytes;
  return Status::ok();
}

// OpFor<T, kResidual>: LayerNormForwardOp, RmsNormForwardOp or RmsNormBiasForwardOp.
template <template <typename, bool> class OpFor, bool kResidual>
Status run_forward(const ForwardCall& c, cudaStream_t stream) {
  const TensorView& x = *c.x;
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_normalized_shape(x, c.shape));
  if (!(c.eps >= 0)) return Status::invalid_argument("eps: must be >= 0, got " + std::to_string(c.eps));
  if (kResidual) {
    REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(*c.residual, "residual"));
    REDUCEKIT_RETURN_IF_ERROR(check_matches(*c.residual, "residual", x, "x"));
    REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(*c.sum, "sum"));
    REDUCEKIT_RETURN_IF_ERROR(check_matches(*c.sum, "sum", x, "x"));
  }
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(*c.y, "y"));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(*c.y, "y", x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.y, "y", x, "x"));
  if (kResidual) {
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.y, "y", *c.residual, "residual"));
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.sum, "sum", x, "x"));
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.sum, "sum", *c.residual, "residual"));
    if (c.y->numel() > 0 && c.y->data == c.sum->data) return Status::invalid_argument("sum: must not be y");
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*c.sum, "sum", *c.y, "y"));
  }
  bool params_f32 = false;
  if (c.weight != nullptr) {
    REDUCEKIT_RETURN_IF_ERROR(check_column_tensor(*c.weight, "weight", x, c.shape));
    params_f32 = c.weight->dtype != x.dtype;
  }
  if (c.bias != nullptr) {
    REDUCEKIT_RETURN_IF_ERROR(check_column_tensor(*c.bias, "bias", x, c.shape));
    if (c.weight != nullptr && c.bias->dtype != c.weight->dtype)
      return Status::invalid_argument(std::string("bias: dtype ") + dtype_name(c.bias->dtype) +
                                      " differs from weight's " + dtype_name(c.weight->dtype));
    params_f32 = c.bias->dtype != x.dtype;
  }

  RowwisePlan plans[4];
  const TensorView* views[4] = {c.x, kResidual ? c.residual : c.x, c.y, kResidual ? c.sum : c.y};
  const char* names[4] = {"x", "residual", "y", "sum"};
  for (int i = 0; i < 4; ++i) REDUCEKIT_RETURN_IF_ERROR(plan_norm_rows(*views[i], names[i], c.shape.rank, &plans[i]));
  const int64_t rows = plans[0].rows, cols = plans[0].cols;
  if (c.mean != nullptr) REDUCEKIT_RETURN_IF_ERROR(check_stat_tensor(*c.mean, "mean", x, rows));
  if (c.rstd != nullptr) REDUCEKIT_RETURN_IF_ERROR(check_stat_tensor(*c.rstd, "rstd", x, rows));
  REDUCEKIT_RETURN_IF_ERROR(check_output_rows(plans[2].rows, plans[2].cols, plans[2].row_stride, "y"));
  if (kResidual) REDUCEKIT_RETURN_IF_ERROR(check_output_rows(plans[3].rows, plans[3].cols, plans[3].row_stride, "sum"));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{c.y, "y"}, {c.sum, "sum"}, {c.mean, "mean"}, {c.rstd, "rstd"}},
                                           {{c.weight, "weight"}, {c.bias, "bias"}}));
  REDUCEKIT_RETURN_IF_ERROR(
      check_disjoint({{c.mean, "mean"}, {c.rstd, "rstd"}}, {{c.x, "x"}, {c.residual, "residual"}}));
  if (rows == 0) return Status::ok();
  if (cols == 0) {  // statistics of an empty set: 0 / 0, as the oracle and torch
    if (x.dtype == DType::kFloat64) {
      REDUCEKIT_RETURN_IF_ERROR(fill_stat<double>(c.mean, rows, NAN, stream));
      return fill_stat<double>(c.rstd, rows, NAN, stream);
    }
    REDUCEKIT_RETURN_IF_ERROR(fill_stat<float>(c.mean, rows, NAN, stream));
    return fill_stat<float>(c.rstd, rows, NAN, stream);
  }
  REDUCEKIT_RETURN_IF_ERROR(check_row_length(cols, "x"));

  // How bytes move depends on alignment; which thread combines what does not (batch invariance).
  const int elem_bytes = static_cast<int>(dtype_size(x.dtype));
  bool aligned = aligned_ptr(c.weight) && aligned_ptr(c.bias);
  for (int i = 0; i < 4; ++i)
    aligned = aligned && rows_on_granules(views[i]->data, plans[i].rows, plans[i].row_stride, elem_bytes);
  RowKernelConfig config;
  REDUCEKIT_RETURN_IF_ERROR((forward_config<OpFor, kResidual>(cols, elem_bytes, &config)));

  switch (x.dtype) {
    case DType::kFloat32:
      return launch_forward<OpFor, kResidual, float>(c, plans, params_f32, config, aligned, stream);
    case DType::kFloat16:
      return launch_forward<OpFor, kResidual, __half>(c, plans, params_f32, config, aligned, stream);
    case DType::kBFloat16:
      return launch_forward<OpFor, kResidual, __nv_bfloat16>(c, plans, params_f32, config, aligned, stream);
    case DType::kFloat64:
      return launch_forward<OpFor, kResidual, double>(c, plans, params_f32, config, aligned, stream);
    default: return Status::invalid_argument("x: unsupported dtype");
  }
}

// rms_norm / add_rms_norm with a bias: RmsNormBiasForwardOp's calls (rms_norm_bias.cu,
// add_rms_norm_bias.cu).
Status rms_norm_bias_forward(const ForwardCall& c, cudaStream_t stream);
Status add_rms_norm_bias_forward(const ForwardCall& c, cudaStream_t stream);

}  // namespace reducekit::norm_detail
