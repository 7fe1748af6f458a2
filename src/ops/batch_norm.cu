// SPDX-License-Identifier: Apache-2.0
// batch_norm: argument checks, the plan (plan/batch_norm_plan.hpp) and dtype / layout dispatch
// of the kernels in kernels/batch_norm.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/batch_norm.cuh"
#include "kernels/batch_norm_resident.cuh"
#include "kernels/batch_norm_sync.cuh"
#include "ops/checks.hpp"
#include "ops/launch.hpp"
#include "plan/batch_norm_plan.hpp"
#include "reducekit/batch_norm.hpp"
#include "reducekit/tuning.hpp"

namespace reducekit {
namespace {

using kernels::BatchNormArgs;


// The SMs of x's device: the statistics pass runs two CTAs an SM.
Status sm_count(const TensorView& x, int* sms) {
  DeviceAttributes device;  // x's: check_float_device_tensor saw it current
  if (!current_device_attributes(&device).is_ok() || device.device != x.device)
    return Status::cuda_error("x: cannot query the SM count of CUDA device " + std::to_string(x.device));
  *sms = device.sms;
  return Status::ok();
}

// Whether x and `others` (null where absent) all start on 16-byte boundaries.
bool aligned16(const TensorView& x, std::initializer_list<const TensorView*> others) {
  bool aligned = reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  for (const TensorView* t : others)
    if (t != nullptr) aligned = aligned && reinterpret_cast<uintptr_t>(t->data) % 16 == 0;
  return aligned;
}

// `others`: the tensors read or written beside x with x's layout (y, dy, dx; null where absent):
// vectors are 16-byte loads and stores in every one of them.
Status plan_of(const TensorView& x, BatchNormPlan* plan, std::initializer_list<const TensorView*> others = {}) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, "x"));
  const bool aligned = aligned16(x, others);
  int sms = 0;
  REDUCEKIT_RETURN_IF_ERROR(sm_count(x, &sms));
  return plan_batch_norm(x.rank, x.sizes, x.strides, static_cast<int>(dtype_size(x.dtype)),
                         static_cast<int>(dtype_size(accumulation_dtype(x.dtype))), aligned, sms, plan);
}

// y, dy, dx: x's sizes, dtype and layout.
Status check_like_x(const TensorView& t, const char* name, const TensorView& x) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t, name));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(t, name, x, "x"));
  for (int d = 0; d < x.rank; ++d)
    if (x.sizes[d] > 1 && t.strides[d] != x.strides[d])
      return Status::invalid_argument(std::string(name) + ": must have x's strides (x's memory layout)");
  return Status::ok();
}

// Each of `vectors` that is given: dense, one value of x's accumulation type a channel.
Status check_channel_vectors(const TensorView& x, std::initializer_list<NamedView> vectors) {
  for (const NamedView& v : vectors)
    if (v.view != nullptr)
      REDUCEKIT_RETURN_IF_ERROR(
          check_dense_vector(*v.view, v.name, accumulation_dtype(x.dtype), x.sizes[1], "one per channel"));
  return Status::ok();
}

template <typename Acc> const Acc* data_of(const TensorView* t) {
  return t != nullptr ? static_cast<const Acc*>(t->data) : nullptr;
}
template <typename Acc> Acc* mutable_data_of(const TensorView* t) {
  return t != nullptr ? static_cast<Acc*>(t->data) : nullptr;
}

template <typename Acc> BatchNormArgs<Acc> args_of(const TensorView& x, const BatchNormPlan& plan) {
  BatchNormArgs<Acc> a;
  a.x = x.data;
  a.n = plan.n;
  a.c = plan.c;
  a.s = plan.s;
  a.chunk = plan.chunk;
  a.chunks = plan.chunks;
  a.tiles = plan.tiles;
  a.stats_ctas = plan.stats_ctas;
  a.step_in_run = plan.step_in_run;
  a.step_offset = plan.step_offset;
  a.wrap_offset = plan.wrap_offset;
  a.jump_in_run = plan.jump_in_run;
  a.jump_offset = plan.jump_offset;
  a.tile_vectors = plan.tile_vectors;
  a.channels_last = plan.layout == BatchNormLayout::kChannelsLast;  // where the forward finds its shifts K_c
  return a;
}

// Channels-first planes of fewer bytes read as columns (plan_batch_norm_columns).
int64_t column_plane_bytes() {
  return tuning("batch_norm_column_plane_bytes").value_or(kBatchNormColumnPlaneBytes);
}

// Whether x (beside `others`, x's layout) runs as the columns of [N, C * S]; `columns`: that plan.
bool columns_of(const TensorView& x, const BatchNormPlan& plan, std::initializer_list<const TensorView*> others,
                BatchNormPlan* columns) {
  const int64_t below_bytes = column_plane_bytes();
  if (below_bytes <= 0 || plan.layout != BatchNormLayout::kChannelsFirst) return false;  // no device query
  int sms = 0;
  if (!sm_count(x, &sms).is_ok()) return false;
  return plan_batch_norm_columns(plan, static_cast<int>(dtype_size(x.dtype)),
                                 static_cast<int>(dtype_size(accumulation_dtype(x.dtype))), aligned16(x, others),
                                 sms, below_bytes, columns);
}

// The vector width (and with it the tiles and chunks) of a call depends on the alignment of y,
// dy and dx too, which a requirements query does not see: the workspace is sized for the larger
// of the two plans. None of it needs zeroing.
Status workspace_need(const TensorView& x, BatchNormRequirements* need) {
  BatchNormPlan vectors, scalars, columns;
  int sms = 0;
  REDUCEKIT_RETURN_IF_ERROR(sm_count(x, &sms));
  const int elem = static_cast<int>(dtype_size(x.dtype)), acc = static_cast<int>(dtype_size(accumulation_dtype(x.dtype)));
  REDUCEKIT_RETURN_IF_ERROR(plan_batch_norm(x.rank, x.sizes, x.strides, elem, acc, true, sms, &vectors));
  REDUCEKIT_RETURN_IF_ERROR(plan_batch_norm(x.rank, x.sizes, x.strides, elem, acc, false, sms, &scalars));
  need->workspace_bytes = std::max(vectors.workspace_bytes, scalars.workspace_bytes);
  if (plan_batch_norm_columns(vectors, elem, acc, true, sms, column_plane_bytes(), &columns))
    need->workspace_bytes = std::max(need->workspace_bytes, columns.workspace_bytes);
  need->workspace_zeroed_bytes = 0;
  return Status::ok();
}

template <typename Acc>
Status bind_workspace(const TensorView& x, const BatchNormPlan& plan, const Workspace& ws, BatchNormArgs<Acc>* a) {
  BatchNormRequirements need;
  REDUCEKIT_RETURN_IF_ERROR(workspace_need(x, &need));
  REDUCEKIT_RETURN_IF_ERROR(check_workspace(ws, need.workspace_bytes, 0));
  auto* base = static_cast<unsigned char*>(ws.data);
  a->partials = reinterpret_cast<Acc*>(base);
  a->params = reinterpret_cast<Acc*>(base + plan.params_offset);
  return Status::ok();
}

// A warp a channel.
unsigned finalize_grid(int64_t channels) {
  constexpr int64_t kChannelsPerCta = kBatchNormThreads / 32;
  return static_cast<unsigned>((channels + kChannelsPerCta - 1) / kChannelsPerCta);
}

using detail::launch_status;

// The kernels' compile-time shape: element type, layout, vector width.
template <typename T_, BatchNormLayout L_, int V_> struct KernelShape {
  using T = T_;
  using Acc = kernels::acc_t<T_>;
  static constexpr BatchNormLayout L = L_;
  static constexpr int V = V_;
};

// run(KernelShape<...>{}) for the plan's layout and vector width.
template <typename T, class Run> Status by_shape(const BatchNormPlan& plan, Run run) {
  constexpr int kFull = 16 / sizeof(T);
  constexpr BatchNormLayout kFirst = BatchNormLayout::kChannelsFirst, kLast = BatchNormLayout::kChannelsLast;
  const bool full = plan.vec == kFull;
  if (plan.layout == kFirst) return full ? run(KernelShape<T, kFirst, kFull>{}) : run(KernelShape<T, kFirst, 1>{});
  return full ? run(KernelShape<T, kLast, kFull>{}) : run(KernelShape<T, kLast, 1>{});
}

template <class Run> Status by_dtype(DType dtype, const BatchNormPlan& plan, Run run) {
  switch (dtype) {
    case DType::kFloat32: return by_shape<float>(plan, run);
    case DType::kFloat16: return by_shape<__half>(plan, run);
    case DType::kBFloat16: return by_shape<__nv_bfloat16>(plan, run);
    case DType::kFloat64: return by_shape<double>(plan, run);
    default: return Status::invalid_argument("x: unsupported dtype");
  }
}

// run(shape, args): by_dtype with the call's kernel arguments made (x's pointers, the plan's
// workspace bound).
template <class Run>
Status with_args(const TensorView& x, const BatchNormPlan& plan, const Workspace& workspace, Run run) {
  return by_dtype(x.dtype, plan, [&](auto shape) {
    using Acc = typename decltype(shape)::Acc;
    BatchNormArgs<Acc> a = args_of<Acc>(x, plan);
    REDUCEKIT_RETURN_IF_ERROR(bind_workspace(x, plan, workspace, &a));
    return run(shape, a);
  });
}

// with_args on the plan the kernels run: the columns of [N, C * S] where x reads as columns
// (columns_of, beside `others`), else `plan`; run(shape, args, kernel plan, by columns).
template <class Run>
Status with_kernel_args(const TensorView& x, const BatchNormPlan& plan, std::initializer_list<const TensorView*> others,
                        const Workspace& workspace, Run run) {
  BatchNormPlan columns;
  const bool by_columns = columns_of(x, plan, others, &columns);
  const BatchNormPlan& kernel_plan = by_columns ? columns : plan;
  return with_args(x, kernel_plan, workspace, [&](auto shape, auto& a) {
    if (by_columns) a.segment = plan.s;
    return run(shape, a, kernel_plan, by_columns);
  });
}

// save_mean and save_invstd of an empty batch: NaN (all-ones bytes are a NaN in float32 and float64).
Status fill_nan(const TensorView& t, cudaStream_t stream) {
  if (t.numel() == 0) return Status::ok();
  const cudaError_t err = cudaMemsetAsync(t.data, 0xff, t.numel() * dtype_size(t.dtype), stream);
  return err == cudaSuccess ? Status::ok() : Status::cuda_error(std::string("batch_norm: ") + cudaGetErrorString(err));
}

Status fill_zero(const TensorView* t, cudaStream_t stream) {
  if (t == nullptr || t->numel() == 0) return Status::ok();
  const cudaError_t err = cudaMemsetAsync(t->data, 0, t->numel() * dtype_size(t->dtype), stream);
  return err == cudaSuccess ? Status::ok() : Status::cuda_error(std::string("batch_norm: ") + cudaGetErrorString(err));
}


// Whether a cluster of `cluster` CTAs of `kernel` with `smem` bytes each fits a GPC of the
// current device (a 16-CTA cluster of one-an-SM CTAs needs 16 free SMs in one GPC). Cached.
Status clusters_fit(const void* kernel, int cluster, std::size_t smem, bool* fit) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, std::size_t, int>, bool> cache;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return launch_status("batch_norm device query");
  const auto key = std::make_tuple(kernel, cluster, smem, device);
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) {
    *fit = it->second;
    return Status::ok();
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(kBatchNormResidentThreads);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();
    clusters = 0;
  }
  *fit = cache[key] = clusters > 0;
  return Status::ok();
}

// Whether the device holds a cluster of the single-read kernel for `rp` (after opting the kernel
// in to its shared memory and cluster size).
template <typename T, bool kBackward> Status resident_fits(const BatchNormResidentPlan& rp, bool* fit) {
  auto* kernel = kernels::batch_norm_resident_kernel<T, kBackward>;
  static_assert(kBatchNormResidentClusterLimit <= 8, "clusters past 8 CTAs need the non-portable opt-in");
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(rp.smem_bytes)) !=
      cudaSuccess)
    return launch_status("batch_norm single-read setup");
  return clusters_fit(reinterpret_cast<const void*>(kernel), rp.cluster, rp.smem_bytes, fit);
}

// The single-read kernel for a plan_batch_norm_resident layout. *ran is false (and nothing is
// launched) where the device cannot hold one of its clusters: the caller takes the three passes.
template <typename T, bool kBackward>
Status launch_resident(const BatchNormArgs<kernels::acc_t<T>>& a, const BatchNormResidentPlan& rp,
                       cudaStream_t stream, bool* ran) {
  *ran = false;
  auto* kernel = kernels::batch_norm_resident_kernel<T, kBackward>;
  const char* name = kBackward ? "batch_norm backward (single read)" : "batch_norm (single read)";
  bool fit = false;
  REDUCEKIT_RETURN_IF_ERROR((resident_fits<T, kBackward>(rp, &fit)));
  if (!fit) return Status::ok();
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {static_cast<unsigned>(rp.cluster), 1, 1};
  // One-CTA channels launch plainly: cluster launches schedule CTAs more slowly.
  REDUCEKIT_RETURN_IF_ERROR(detail::launch_with_attributes(kernel, a.c * rp.cluster, kBatchNormResidentThreads,
                                                           rp.smem_bytes, stream, &cluster, rp.cluster > 1 ? 1 : 0,
                                                           name, a, rp));
  *ran = true;
  return Status::ok();
}

// A training forward (or a backward): the single-read kernel where `rp` has a layout the device
// holds, else the three passes (statistics, finalize, apply; no apply pass when !apply).
template <class S, bool kBackward>
Status run_training_passes(const BatchNormArgs<typename S::Acc>& a, const BatchNormPlan& plan,
                           const BatchNormResidentPlan& rp, bool apply, cudaStream_t stream) {
  using T = typename S::T;
  if (rp.cluster > 0) {
    bool ran = false;
    REDUCEKIT_RETURN_IF_ERROR((launch_resident<T, kBackward>(a, rp, stream, &ran)));
    if (ran) return Status::ok();
  }
  const auto stats_grid = static_cast<unsigned>(plan.stats_grid());
  kernels::batch_norm_stats_kernel<T, S::L, S::V, kBackward><<<stats_grid, kBatchNormThreads, 0, stream>>>(a);
  REDUCEKIT_RETURN_IF_ERROR(launch_status(kBackward ? "batch_norm backward statistics" : "batch_norm statistics"));
  // The finalize and apply kernels overlap the kernel ahead: each waits before reading what it wrote.
  const cudaLaunchAttribute overlap = detail::overlap_previous_attribute();
  REDUCEKIT_RETURN_IF_ERROR(detail::launch_with_attribute(
      kernels::batch_norm_finalize_kernel<T, kBackward>, finalize_grid(a.c / a.segment), kBatchNormThreads, 0, stream,
      overlap, kBackward ? "batch_norm backward finalize" : "batch_norm finalize", a));
  if (!apply) return Status::ok();
  return detail::launch_with_attribute(kernels::batch_norm_apply_kernel<T, S::L, S::V, kBackward, false>, plan.ctas(),
                                       kBatchNormThreads, 0, stream, overlap,
                                       kBackward ? "batch_norm backward" : "batch_norm", a);
}

bool same_offset16(std::initializer_list<const TensorView*> tensors) {
  int offset = -1;
  for (const TensorView* t : tensors) {
    if (t == nullptr) continue;
    const int o = static_cast<int>(reinterpret_cast<uintptr_t>(t->data) % 16);
    if (offset >= 0 && o != offset) return false;
    offset = o;
  }
  return true;
}

// A packet [C][3] (gathered: [R][C][3], R >= 1) of float64, contiguous, on the current device;
// channels < 0 takes any C. *ranks: R (1 for one packet).
Status check_packet(const TensorView& t, const char* name, int64_t channels, bool gathered, int64_t* ranks) {
  const int want_rank = gathered ? 3 : 2;
  const std::string shape = gathered ? "[R, C, 3]" : "[C, 3]";
  if (t.rank != want_rank || t.sizes[want_rank - 1] != kBatchNormPacketWidth ||
      (channels >= 0 && t.sizes[want_rank - 2] != channels))
    return Status::invalid_argument(std::string(name) + ": expected " + shape + " with C = " +
                                    (channels >= 0 ? std::to_string(channels) : std::string("the channels")) +
                                    ", got " + shape_string(t));
  if (gathered && t.sizes[0] < 1) return Status::invalid_argument(std::string(name) + ": no ranks (size 0 in dim 0)");
  REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(t, name, DType::kFloat64, t.numel(), "packets of float64"));
  if (ranks != nullptr) *ranks = gathered ? t.sizes[0] : 1;
  return Status::ok();
}

Status check_options(const BatchNormOptions& options) {
  if (!std::isfinite(options.momentum))
    return Status::invalid_argument("momentum: expected a finite value, got " + std::to_string(options.momentum));
  if (!(options.eps >= 0.0) || !std::isfinite(options.eps))
    return Status::invalid_argument("eps: expected a finite value >= 0, got " + std::to_string(options.eps));
  return Status::ok();
}

unsigned channel_grid(int64_t c) { return static_cast<unsigned>((c + kBatchNormThreads - 1) / kBatchNormThreads); }

}  // namespace

Status batch_norm_requirements(const TensorView& x, BatchNormRequirements* req) {
  if (req == nullptr) return Status::invalid_argument("req: must not be null");
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(x, "x"));
  return workspace_need(x, req);
}

Status batch_norm_reads_once(const TensorView& x, bool backward, bool* once) {
  if (once == nullptr) return Status::invalid_argument("once: must not be null");
  *once = false;
  BatchNormPlan plan, columns;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan));
  const BatchNormResidentPlan rp =
      plan_batch_norm_resident(plan, static_cast<int>(dtype_size(x.dtype)), backward ? 2 : 1, true);
  if (rp.cluster == 0 || columns_of(x, plan, {}, &columns)) return Status::ok();
  return by_dtype(x.dtype, plan, [&](auto shape) {
    using T = typename decltype(shape)::T;
    return backward ? resident_fits<T, true>(rp, once) : resident_fits<T, false>(rp, once);
  });
}

Status batch_norm_training_forward(const TensorView& x, const TensorView* weight, const TensorView* bias,
                                   const TensorView* running_mean, const TensorView* running_var,
                                   const BatchNormOptions& options, const TensorView& y, const TensorView& save_mean,
                                   const TensorView& save_invstd, const Workspace& workspace, cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan, {&y}));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(y, "y", x));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(y, "y", x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_channel_vectors(x, {{weight, "weight"}, {bias, "bias"},
                                                      {running_mean, "running_mean"}, {running_var, "running_var"},
                                                      {&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}}));
  if ((running_mean == nullptr) != (running_var == nullptr))
    return Status::invalid_argument("running_var: running_mean and running_var come together (both or neither)");
  // The running statistics are written in place, so they count as outputs here.
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&y, "y"}, {&save_mean, "save_mean"}, {&save_invstd, "save_invstd"},
                                            {running_mean, "running_mean"}, {running_var, "running_var"}},
                                           {{weight, "weight"}, {bias, "bias"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&save_mean, "save_mean"}, {&save_invstd, "save_invstd"},
                                            {running_mean, "running_mean"}, {running_var, "running_var"}},
                                           {{&x, "x"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_options(options));
  if (plan.channel_count() == 1)
    return Status::invalid_argument("x: expected more than 1 value per channel when training, got input of size " +
                                    shape_string(x));
  if (plan.channel_count() == 0) {
    REDUCEKIT_RETURN_IF_ERROR(fill_nan(save_mean, stream));
    return fill_nan(save_invstd, stream);
  }
  return with_kernel_args(x, plan, {&y}, workspace,
                          [&](auto shape, auto& a, const BatchNormPlan& kernel_plan, bool by_columns) {
    using S = decltype(shape);
    using T = typename S::T;
    using Acc = typename S::Acc;
    a.out = y.data;
    a.weight = data_of<Acc>(weight);
    a.bias = data_of<Acc>(bias);
    a.running_mean = mutable_data_of<Acc>(running_mean);
    a.running_var = mutable_data_of<Acc>(running_var);
    a.momentum = static_cast<Acc>(options.momentum);
    a.eps = static_cast<Acc>(options.eps);
    a.save_mean = static_cast<Acc*>(save_mean.data);
    a.save_invstd = static_cast<Acc*>(save_invstd.data);
    const BatchNormResidentPlan rp =
        by_columns ? BatchNormResidentPlan{} : plan_batch_norm_resident(plan, sizeof(T), 1, same_offset16({&x, &y}));
    return run_training_passes<S, false>(a, kernel_plan, rp, true, stream);
  });
}

Status batch_norm_inference_forward(const TensorView& x, const TensorView* weight, const TensorView* bias,
                                    const TensorView& running_mean, const TensorView& running_var, double eps,
                                    const TensorView& y, const TensorView* save_mean, const TensorView* save_invstd,
                                    cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan, {&y}));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(y, "y", x));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(y, "y", x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_channel_vectors(x, {{weight, "weight"}, {bias, "bias"},
                                                      {&running_mean, "running_mean"}, {&running_var, "running_var"},
                                                      {save_mean, "save_mean"}, {save_invstd, "save_invstd"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&y, "y"}, {save_mean, "save_mean"}, {save_invstd, "save_invstd"}},
                                           {{weight, "weight"}, {bias, "bias"}, {&running_mean, "running_mean"},
                                            {&running_var, "running_var"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{save_mean, "save_mean"}, {save_invstd, "save_invstd"}}, {{&x, "x"}}));
  if (!(eps >= 0.0) || !std::isfinite(eps))
    return Status::invalid_argument("eps: expected a finite value >= 0, got " + std::to_string(eps));
  // An empty batch still gets its saved statistics: one (empty) chunk a tile.
  plan.chunks = std::max<int64_t>(plan.chunks, 1);
  return by_dtype(x.dtype, plan, [&](auto shape) {
    using S = decltype(shape);
    using T = typename S::T;
    using Acc = typename S::Acc;
    BatchNormArgs<Acc> a = args_of<Acc>(x, plan);
    a.out = y.data;
    a.weight = data_of<Acc>(weight);
    a.bias = data_of<Acc>(bias);
    a.running_mean = static_cast<Acc*>(running_mean.data);
    a.running_var = static_cast<Acc*>(running_var.data);
    a.eps = static_cast<Acc>(eps);
    a.save_mean = mutable_data_of<Acc>(save_mean);
    a.save_invstd = mutable_data_of<Acc>(save_invstd);
    // The planner's flat planes (batch_norm_inference_flat), x and y on 16-byte boundaries: one
    // flat array of vectors, each CTA's planes' parameters set out once in shared memory.
    constexpr int kFlatVec = 16 / sizeof(T);
    const int64_t total = plan.n * plan.c * plan.s;
    const bool on_granules = aligned16(x, {&y});
    if (batch_norm_inference_flat(plan, sizeof(T)) && on_granules) {
      const kernels::BatchNormFlatShape f{total, plan.s, plan.c, 1.0 / double(plan.s), 1.0 / double(plan.c)};
      const auto flat_grid = static_cast<unsigned>(batch_norm_flat_grid(total, sizeof(T)));
      kernels::batch_norm_inference_flat_kernel<T, kFlatVec><<<flat_grid, kBatchNormThreads, 0, stream>>>(a, f);
      return launch_status("batch_norm inference");
    }
    const auto grid = static_cast<unsigned>(plan.ctas());
    kernels::batch_norm_apply_kernel<T, S::L, S::V, false, true><<<grid, kBatchNormThreads, 0, stream>>>(a);
    return launch_status("batch_norm inference");
  });
}

Status batch_norm_backward(const TensorView& dy, const TensorView& x, const TensorView* weight,
                           const TensorView& save_mean, const TensorView& save_invstd, bool batch_statistics,
                           const TensorView* dx, const TensorView* dweight, const TensorView* dbias,
                           const Workspace& workspace, cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan, {&dy, dx}));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(dy, "dy", x));
  if (dx != nullptr) {
    REDUCEKIT_RETURN_IF_ERROR(check_like_x(*dx, "dx", x));
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*dx, "dx", x, "x"));
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(*dx, "dx", dy, "dy"));
  }
  REDUCEKIT_RETURN_IF_ERROR(check_channel_vectors(x, {{weight, "weight"}, {&save_mean, "save_mean"},
                                                      {&save_invstd, "save_invstd"}, {dweight, "dweight"},
                                                      {dbias, "dbias"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint(
      {{dx, "dx"}, {dweight, "dweight"}, {dbias, "dbias"}},
      {{weight, "weight"}, {&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{dweight, "dweight"}, {dbias, "dbias"}}, {{&x, "x"}, {&dy, "dy"}}));
  if (plan.channel_count() == 0) {  // sums over nothing
    REDUCEKIT_RETURN_IF_ERROR(fill_zero(dweight, stream));
    return fill_zero(dbias, stream);
  }
  return with_kernel_args(x, plan, {&dy, dx}, workspace,
                          [&](auto shape, auto& a, const BatchNormPlan& kernel_plan, bool by_columns) {
    using S = decltype(shape);
    using T = typename S::T;
    using Acc = typename S::Acc;
    a.dy = dy.data;
    a.out = dx != nullptr ? dx->data : nullptr;
    a.weight = data_of<Acc>(weight);
    a.mean = static_cast<const Acc*>(save_mean.data);
    a.invstd = static_cast<const Acc*>(save_invstd.data);
    a.batch_statistics = batch_statistics;
    a.dweight = mutable_data_of<Acc>(dweight);
    a.dbias = mutable_data_of<Acc>(dbias);
    const bool shared_offset = same_offset16({&x, &dy, dx});
    const BatchNormResidentPlan rp =
        by_columns ? BatchNormResidentPlan{} : plan_batch_norm_resident(plan, sizeof(T), 2, shared_offset);
    return run_training_passes<S, true>(a, kernel_plan, rp, dx != nullptr, stream);
  });
}

// ---- stages of a batch spread over ranks ------------------------------------------------------
// The statistics pass is the three-pass path's (never the single-read kernel, which merges in
// another order and writes y in the same launch); its partials become a packet.

Status batch_norm_moments(const TensorView& x, const TensorView& packet, const Workspace& workspace,
                          cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan));
  REDUCEKIT_RETURN_IF_ERROR(check_packet(packet, "packet", x.sizes[1], false, nullptr));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&packet, "packet"}}, {{&x, "x"}}));
  if (plan.channel_count() == 0) return fill_zero(&packet, stream);  // (0, 0, 0): merges as nothing
  return with_args(x, plan, workspace, [&](auto shape, auto& a) {
    using S = decltype(shape);
    using T = typename S::T;
    const auto stats_grid = static_cast<unsigned>(plan.stats_grid());
    kernels::batch_norm_stats_kernel<T, S::L, S::V, false><<<stats_grid, kBatchNormThreads, 0, stream>>>(a);
    REDUCEKIT_RETURN_IF_ERROR(launch_status("batch_norm_moments statistics"));
    kernels::batch_norm_packet_kernel<T, false>
        <<<finalize_grid(plan.c), kBatchNormThreads, 0, stream>>>(a, static_cast<double*>(packet.data));
    return launch_status("batch_norm_moments packet");
  });
}

Status batch_norm_merge_moments(const TensorView& packets, DType dtype, const TensorView* running_mean,
                                const TensorView* running_var, const BatchNormOptions& options,
                                const TensorView& save_mean, const TensorView& save_invstd, cudaStream_t stream) {
  if (!is_floating(dtype))
    return Status::invalid_argument(std::string("dtype: expected x's dtype (float32, float16, bfloat16 or float64), got ") +
                                    dtype_name(dtype));
  int64_t ranks = 0;
  REDUCEKIT_RETURN_IF_ERROR(check_packet(packets, "packets", -1, true, &ranks));
  const int64_t c = packets.sizes[1];
  const DType acc = accumulation_dtype(dtype);
  const auto channel = [&](const TensorView* t, const char* name) {
    return t == nullptr ? Status::ok() : check_dense_vector(*t, name, acc, c, "one per channel of the packets");
  };
  REDUCEKIT_RETURN_IF_ERROR(channel(running_mean, "running_mean"));
  REDUCEKIT_RETURN_IF_ERROR(channel(running_var, "running_var"));
  REDUCEKIT_RETURN_IF_ERROR(channel(&save_mean, "save_mean"));
  REDUCEKIT_RETURN_IF_ERROR(channel(&save_invstd, "save_invstd"));
  if ((running_mean == nullptr) != (running_var == nullptr))
    return Status::invalid_argument("running_var: running_mean and running_var come together (both or neither)");
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&save_mean, "save_mean"}, {&save_invstd, "save_invstd"},
                                            {running_mean, "running_mean"}, {running_var, "running_var"}},
                                           {{&packets, "packets"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_options(options));
  if (c == 0) return Status::ok();
  const auto* p = static_cast<const double*>(packets.data);
  if (acc == DType::kFloat64) {
    kernels::batch_norm_merge_moments_kernel<double><<<channel_grid(c), kBatchNormThreads, 0, stream>>>(
        p, ranks, c, options.momentum, options.eps, mutable_data_of<double>(running_mean),
        mutable_data_of<double>(running_var), static_cast<double*>(save_mean.data),
        static_cast<double*>(save_invstd.data));
  } else {
    kernels::batch_norm_merge_moments_kernel<float><<<channel_grid(c), kBatchNormThreads, 0, stream>>>(
        p, ranks, c, static_cast<float>(options.momentum), static_cast<float>(options.eps),
        mutable_data_of<float>(running_mean), mutable_data_of<float>(running_var),
        static_cast<float*>(save_mean.data), static_cast<float*>(save_invstd.data));
  }
  return launch_status("batch_norm_merge_moments");
}

Status batch_norm_apply(const TensorView& x, const TensorView* weight, const TensorView* bias, const TensorView& mean,
                        const TensorView& invstd, const TensorView& y, const Workspace& workspace,
                        cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan, {&y}));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(y, "y", x));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(y, "y", x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(
      check_channel_vectors(x, {{weight, "weight"}, {bias, "bias"}, {&mean, "mean"}, {&invstd, "invstd"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint(
      {{&y, "y"}}, {{weight, "weight"}, {bias, "bias"}, {&mean, "mean"}, {&invstd, "invstd"}}));
  if (plan.channel_count() == 0) return Status::ok();
  return with_args(x, plan, workspace, [&](auto shape, auto& a) {
    using S = decltype(shape);
    using T = typename S::T;
    using Acc = typename S::Acc;
    a.out = y.data;
    kernels::batch_norm_forward_params_kernel<Acc><<<channel_grid(plan.c), kBatchNormThreads, 0, stream>>>(
        plan.c, static_cast<const Acc*>(mean.data), static_cast<const Acc*>(invstd.data), data_of<Acc>(weight),
        data_of<Acc>(bias), a.params);
    REDUCEKIT_RETURN_IF_ERROR(launch_status("batch_norm_apply parameters"));
    const auto grid = static_cast<unsigned>(plan.ctas());
    kernels::batch_norm_apply_kernel<T, S::L, S::V, false, false><<<grid, kBatchNormThreads, 0, stream>>>(a);
    return launch_status("batch_norm_apply");
  });
}

Status batch_norm_backward_sums(const TensorView& dy, const TensorView& x, const TensorView& save_mean,
                                const TensorView& save_invstd, const TensorView& packet, const TensorView* dweight,
                                const TensorView* dbias, const Workspace& workspace, cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan, {&dy}));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(dy, "dy", x));
  REDUCEKIT_RETURN_IF_ERROR(check_channel_vectors(
      x, {{&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}, {dweight, "dweight"}, {dbias, "dbias"}}));
  REDUCEKIT_RETURN_IF_ERROR(check_packet(packet, "packet", x.sizes[1], false, nullptr));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint(
      {{&packet, "packet"}, {dweight, "dweight"}, {dbias, "dbias"}},
      {{&x, "x"}, {&dy, "dy"}, {&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}}));
  if (plan.channel_count() == 0) {  // sums over nothing
    REDUCEKIT_RETURN_IF_ERROR(fill_zero(&packet, stream));
    REDUCEKIT_RETURN_IF_ERROR(fill_zero(dweight, stream));
    return fill_zero(dbias, stream);
  }
  return with_args(x, plan, workspace, [&](auto shape, auto& a) {
    using S = decltype(shape);
    using T = typename S::T;
    using Acc = typename S::Acc;
    a.dy = dy.data;
    a.mean = static_cast<const Acc*>(save_mean.data);
    a.invstd = static_cast<const Acc*>(save_invstd.data);
    a.dweight = mutable_data_of<Acc>(dweight);
    a.dbias = mutable_data_of<Acc>(dbias);
    const auto stats_grid = static_cast<unsigned>(plan.stats_grid());
    kernels::batch_norm_stats_kernel<T, S::L, S::V, true><<<stats_grid, kBatchNormThreads, 0, stream>>>(a);
    REDUCEKIT_RETURN_IF_ERROR(launch_status("batch_norm_backward_sums statistics"));
    kernels::batch_norm_packet_kernel<T, true>
        <<<finalize_grid(plan.c), kBatchNormThreads, 0, stream>>>(a, static_cast<double*>(packet.data));
    return launch_status("batch_norm_backward_sums packet");
  });
}

Status batch_norm_backward_apply(const TensorView& dy, const TensorView& x, const TensorView* weight,
                                 const TensorView& save_mean, const TensorView& save_invstd,
                                 const TensorView& packets, const TensorView& dx, const Workspace& workspace,
                                 cudaStream_t stream) {
  BatchNormPlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_of(x, &plan, {&dy, &dx}));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(dy, "dy", x));
  REDUCEKIT_RETURN_IF_ERROR(check_like_x(dx, "dx", x));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(dx, "dx", x, "x"));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(dx, "dx", dy, "dy"));
  REDUCEKIT_RETURN_IF_ERROR(
      check_channel_vectors(x, {{weight, "weight"}, {&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}}));
  int64_t ranks = 0;
  REDUCEKIT_RETURN_IF_ERROR(check_packet(packets, "packets", x.sizes[1], true, &ranks));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&dx, "dx"}}, {{weight, "weight"}, {&save_mean, "save_mean"},
                                                           {&save_invstd, "save_invstd"}, {&packets, "packets"}}));
  if (plan.channel_count() == 0) return Status::ok();
  return with_args(x, plan, workspace, [&](auto shape, auto& a) {
    using S = decltype(shape);
    using T = typename S::T;
    using Acc = typename S::Acc;
    a.dy = dy.data;
    a.out = dx.data;
    kernels::batch_norm_backward_params_kernel<Acc><<<channel_grid(plan.c), kBatchNormThreads, 0, stream>>>(
        static_cast<const double*>(packets.data), ranks, plan.c, static_cast<const Acc*>(save_mean.data),
        static_cast<const Acc*>(save_invstd.data), data_of<Acc>(weight), a.params);
    REDUCEKIT_RETURN_IF_ERROR(launch_status("batch_norm_backward_apply parameters"));
    const auto grid = static_cast<unsigned>(plan.ctas());
    kernels::batch_norm_apply_kernel<T, S::L, S::V, true, false><<<grid, kBatchNormThreads, 0, stream>>>(a);
    return launch_status("batch_norm_backward_apply");
  });
}

}  // namespace reducekit
