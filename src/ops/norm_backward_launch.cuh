// SPDX-License-Identifier: Apache-2.0
// The kernels of layer_norm / rms_norm backward for one element type (norm_backward.cu has the
// entry points): the fused path's layout and launches, and the two-kernel path's. Each element
// type's are compiled in a file of their own (norm_backward_<type>.cu), so the four compile side
// by side; the other files see only the declarations.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "kernels/norm_backward_fused.cuh"
#include "ops/norm_launch.cuh"
#include "plan/norm_backward_plan.hpp"
#include "reducekit/tuning.hpp"

namespace reducekit::norm_detail {

static_assert(kFusedMaxThreads <= kernels::kMaxBlockThreads, "fused CTAs within the kernels' launch bounds");

// Rows per partial row of dweight/dbias: fixed, growing only to keep the grid's y extent legal.
inline int64_t param_grad_rows_per_block(int64_t rows) {
  int64_t per = kernels::kParamGradRowsPerBlock;
  while ((rows + per - 1) / per > 65535) per *= 2;
  return per;
}

// ---- fused path: layout, and how many CTAs loop over the rows ---------------------------------

// The largest tile (vectors a thread) and the most CTAs an SM that G counts: the shipped values,
// or a sweep's overrides (norm_bwd_*, reducekit/tuning.hpp).
struct FusedTuning {
  int max_vpt = 4;
  int ctas_per_sm = kFusedMaxCtasPerSm;
};
inline FusedTuning fused_tuning() {
  FusedTuning f;
  if (const auto v = tuning("norm_bwd_max_vpt")) f.max_vpt = std::max<int>(1, static_cast<int>(*v));
  if (const auto v = tuning("norm_bwd_ctas_per_sm")) f.ctas_per_sm = std::max<int>(1, static_cast<int>(*v));
  return f;
}

inline FusedNormBackwardLayout fused_layout(int64_t cols, int elem_bytes) {
  return plan_fused_norm_backward(cols, elem_bytes, std::min(fused_tuning().max_vpt, fused_max_vpt(elem_bytes)));
}

// f(std::integral_constant<int, VPT>{}) for a one-row layout's vpt (1, 2 or 4, from the
// dtype's least to its cap).
template <typename T, class F> Status with_vpt(int vpt, F&& f) {
  constexpr int kMin = fused_one_row_min_vpt(sizeof(T));
  constexpr int kMax = fused_max_vpt(sizeof(T));
  if constexpr (kMin == 1) {
    if (vpt == 1) return f(std::integral_constant<int, 1>{});
  }
  if constexpr (kMin <= 2 && kMax >= 2) {
    if (vpt == 2) return f(std::integral_constant<int, 2>{});
  }
  if constexpr (kMax >= 4) {
    if (vpt == 4) return f(std::integral_constant<int, 4>{});
  }
  return Status::unsupported("norm backward: no fused kernel for " + std::to_string(vpt) + " vectors a thread");
}

// f(kernel, row_threads) for the fused kernel a layout launches, kLayer, kBias and kAligned given:
// norm_backward_fused_kernel for the layout's vpt (one-row CTAs: with_vpt's; row lanes:
// fused_row_lane_vpt only) and min(S, 32) lanes.
template <typename T, bool kLayer, bool kBias, bool kAligned, class F>
Status with_fused_kernel(const FusedNormBackwardLayout& l, F&& f) {
  auto kernel = [&](auto vpt, auto lanes) {
    return f(kernels::norm_backward_fused_kernel<T, kLayer, kBias, decltype(vpt)::value, decltype(lanes)::value,
                                                 kAligned>,
             l.row_threads);
  };
  if (l.rows_per_cta == 1) {
    if (l.row_threads % 32 != 0)
      return Status::unsupported("norm backward: one-row CTAs of " + std::to_string(l.row_threads) + " threads");
    return with_vpt<T>(l.vpt, [&](auto vpt) { return kernel(vpt, std::integral_constant<int, 32>{}); });
  }
  constexpr int VPT = fused_row_lane_vpt(sizeof(T));
  if (l.vpt != VPT)
    return Status::unsupported("norm backward: no row-lane kernel for " + std::to_string(l.vpt) + " vectors a thread");
  const std::integral_constant<int, VPT> vpt;
  switch (std::min(l.row_threads, 32)) {
    case 4: return kernel(vpt, std::integral_constant<int, 4>{});
    case 8: return kernel(vpt, std::integral_constant<int, 8>{});
    case 16: return kernel(vpt, std::integral_constant<int, 16>{});
    case 32:
      if (l.row_threads % 32 == 0) return kernel(vpt, std::integral_constant<int, 32>{});
  }
  return Status::unsupported("norm backward: no row-lane kernel for " + std::to_string(l.row_threads) +
                             " threads a row");
}

template <class Kernel> Status fused_kernel_groups(Kernel kernel, const FusedNormBackwardLayout& l, int sms,
                                                  int64_t* groups) {
  const std::size_t smem = kernels::fused_ring_bytes(l.threads, l.vpt);
  REDUCEKIT_RETURN_IF_ERROR(detail::allow_smem(kernel, smem, "norm_backward_fused_kernel"));
  const int64_t cap = std::max<int64_t>(1, int64_t(sms) * fused_tuning().ctas_per_sm);
  int resident = 0;
  REDUCEKIT_RETURN_IF_ERROR(detail::resident_ctas(reinterpret_cast<const void*>(kernel), l.threads, smem, &resident));
  *groups = std::min<int64_t>(resident, cap);
  if (*groups < 1) return Status::unsupported("norm backward: the fused kernel cannot be resident on this device");
  return Status::ok();
}

// CTAs that stay resident at once on the current device (each loops over its rows), cached:
// the fewest over every instantiation a call may pick (layer; rms with and without dbias;
// aligned/unaligned), so G, and with it the order dweight is summed in, is the same whichever
// kernel runs, and the workspace (sized without knowing which) fits every one. Never from
// timing; the row count enters only as min(G, ceil(rows / R)) (fused_groups). Each CTA writes
// one partial row, whatever its R.
template <typename T> Status fused_resident_groups(const FusedNormBackwardLayout& l, int64_t* groups) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, int>, int64_t> cache;
  DeviceAttributes device;
  REDUCEKIT_RETURN_IF_ERROR(current_device_attributes(&device));
  const int sms = device.sms;
  const auto key = std::make_tuple(device.device, static_cast<int>(sizeof(T)), l.vpt, l.threads, l.row_threads);
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) {
    *groups = it->second;
    return Status::ok();
  }
  int64_t g[6] = {};
  int i = 0;
  auto count = [&](auto kernel, int) { return fused_kernel_groups(kernel, l, sms, &g[i++]); };
  // layer_norm always sums dbias; rms_norm only for a bias.
  REDUCEKIT_RETURN_IF_ERROR((with_fused_kernel<T, true, true, true>(l, count)));
  REDUCEKIT_RETURN_IF_ERROR((with_fused_kernel<T, true, true, false>(l, count)));
  REDUCEKIT_RETURN_IF_ERROR((with_fused_kernel<T, false, false, true>(l, count)));
  REDUCEKIT_RETURN_IF_ERROR((with_fused_kernel<T, false, false, false>(l, count)));
  REDUCEKIT_RETURN_IF_ERROR((with_fused_kernel<T, false, true, true>(l, count)));
  REDUCEKIT_RETURN_IF_ERROR((with_fused_kernel<T, false, true, false>(l, count)));
  *groups = cache[key] = *std::min_element(g, g + 6);
  return Status::ok();
}

template <typename T> Status fused_groups(const FusedNormBackwardLayout& l, int64_t rows, int64_t* groups) {
  REDUCEKIT_RETURN_IF_ERROR(fused_resident_groups<T>(l, groups));
  *groups = std::min(*groups, (rows + l.rows_per_cta - 1) / l.rows_per_cta);
  return Status::ok();
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

// dbias's partial rows are read only when dbias is wanted: rms_norm's kernels without a bias leave
// them unwritten.
template <typename T, typename P>
Status launch_param_grad_sum(const BackwardCall& c, const kernels::acc_t<T>* partial, int64_t groups, int cols,
                             cudaStream_t stream) {
  P* dw = c.dweight != nullptr ? static_cast<P*>(c.dweight->data) : nullptr;
  P* db = c.dbias != nullptr ? static_cast<P*>(c.dbias->data) : nullptr;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), db != nullptr ? 2u : 1u);
  kernels::norm_param_grad_sum_kernel<kernels::acc_t<T>, P>
      <<<grid, kernels::kParamSumWarps * 32, 0, stream>>>(partial, groups, cols, dw, db);
  return detail::launch_status("norm_param_grad_sum_kernel");
}

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
  return launch_param_grad_sum<T, P>(c, a.partial, a.blocks, a.cols, stream);
}


template <typename T, bool kLayer, bool kBias, bool kAligned>
Status launch_fused_kernel(const kernels::RowArgs<T, 2>& args, const kernels::NormExtra<T>& extra,
                           kernels::acc_t<T>* partial, const FusedNormBackwardLayout& l, int64_t groups,
                           cudaStream_t stream) {
  RowKernelConfig config;
  config.threads = l.threads;
  config.smem_bytes = kernels::fused_ring_bytes(l.threads, l.vpt);
  return with_fused_kernel<T, kLayer, kBias, kAligned>(l, [&](auto kernel, int row_threads) {
    return detail::launch_blocks(kernel, groups, config, stream, "norm_backward_fused_kernel", args, extra, partial,
                                 row_threads);
  });
}

// One pass for dx and the partial rows, then their sum. Either output group may be absent.
template <typename T, bool kLayer>
Status launch_fused_backward(const BackwardCall& c, const RowwisePlan (&plans)[3], const FusedNormBackwardLayout& l,
                             bool params_f32, bool aligned, cudaStream_t stream) {
  using Acc = kernels::acc_t<T>;
  int64_t groups = 0;
  REDUCEKIT_RETURN_IF_ERROR(fused_groups<T>(l, plans[0].rows, &groups));
  const void* in[2] = {c.x->data, c.dy->data};
  const kernels::RowArgs<T, 2> args = row_args<T, 2>(in, plans, c.dx != nullptr ? c.dx->data : nullptr, plans[2]);
  kernels::NormExtra<T> extra;
  extra.weight = c.weight != nullptr ? c.weight->data : nullptr;
  extra.params_f32 = params_f32;
  extra.saved_mean = c.mean != nullptr ? static_cast<const Acc*>(c.mean->data) : nullptr;
  extra.saved_rstd = static_cast<const Acc*>(c.rstd->data);
  const bool want_params = c.dweight != nullptr || c.dbias != nullptr;
  Acc* partial = want_params ? static_cast<Acc*>(c.workspace.data) : nullptr;
  auto launch = [&](auto bias) {
    constexpr bool kBias = decltype(bias)::value;
    return aligned ? launch_fused_kernel<T, kLayer, kBias, true>(args, extra, partial, l, groups, stream)
                   : launch_fused_kernel<T, kLayer, kBias, false>(args, extra, partial, l, groups, stream);
  };
  // layer_norm always sums dbias; rms_norm only for a bias (no layer_norm kernel without one).
  if constexpr (kLayer) REDUCEKIT_RETURN_IF_ERROR(launch(std::true_type{}));
  else REDUCEKIT_RETURN_IF_ERROR(c.dbias != nullptr ? launch(std::true_type{}) : launch(std::false_type{}));
  if (!want_params) return Status::ok();
  const TensorView* p = c.dweight != nullptr ? c.dweight : c.dbias;
  if constexpr (sizeof(T) == 2) {  // only 16-bit x may have float32 parameters
    if (p->dtype == DType::kFloat32) return launch_param_grad_sum<T, float>(c, partial, groups, args.cols, stream);
  }
  return launch_param_grad_sum<T, T>(c, partial, groups, args.cols, stream);
}

template <typename T, bool kLayer>
Status launch_backward(const BackwardCall& c, const RowwisePlan (&plans)[3], bool params_f32, bool aligned,
                       cudaStream_t stream) {
  using Acc = kernels::acc_t<T>;
  const FusedNormBackwardLayout fused = fused_layout(plans[0].cols, static_cast<int>(sizeof(T)));
  if (fused.fused) return launch_fused_backward<T, kLayer>(c, plans, fused, params_f32, aligned, stream);
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
  RowKernelLimits limits = row_policy(RowFamily::kNormBackward, static_cast<int>(sizeof(T)));
  REDUCEKIT_RETURN_IF_ERROR(row_kernel_limits(&limits));
  const RowKernelConfig config = plan_row_kernel(args.cols, static_cast<int>(sizeof(T)), 2, limits);
  return launch_row_op<RowFamily::kNormBackward, T, Op>(args, extra, config, aligned, stream);
}

// The kernels of element type T: explicitly instantiated once, in norm_backward_<type>.cu.
template <typename T> struct NormBackwardKernels {
  // dx and the parameter gradients of layer_norm (layer) or rms_norm.
  static Status launch(const BackwardCall& c, const RowwisePlan (&plans)[3], bool layer, bool params_f32,
                       bool aligned, cudaStream_t stream);
  // The fused path's CTAs for `rows` rows: its partial rows of dweight/dbias.
  static Status groups(const FusedNormBackwardLayout& l, int64_t rows, int64_t* groups);
};

template <typename T>
Status NormBackwardKernels<T>::launch(const BackwardCall& c, const RowwisePlan (&plans)[3], bool layer,
                                      bool params_f32, bool aligned, cudaStream_t stream) {
  if (layer) return launch_backward<T, true>(c, plans, params_f32, aligned, stream);
  return launch_backward<T, false>(c, plans, params_f32, aligned, stream);
}

template <typename T>
Status NormBackwardKernels<T>::groups(const FusedNormBackwardLayout& l, int64_t rows, int64_t* groups) {
  return fused_groups<T>(l, rows, groups);
}

extern template struct NormBackwardKernels<float>;
extern template struct NormBackwardKernels<double>;
extern template struct NormBackwardKernels<__half>;
extern template struct NormBackwardKernels<__nv_bfloat16>;

}  // namespace reducekit::norm_detail
