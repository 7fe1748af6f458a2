// SPDX-License-Identifier: Apache-2.0
// cross_entropy_forward / _backward / _fused, the class-probability cross_entropy_probs_* and the
// losses' reduction cross_entropy_reduce: argument checks, row planning and dtype dispatch; the
// kernels are in kernels/cross_entropy.cuh, cross_entropy_probs.cuh and cross_entropy_reduce.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cross_entropy.cuh"
#include "kernels/cross_entropy_probs.cuh"
#include "kernels/cross_entropy_reduce.cuh"
#include "ops/checks.hpp"
#include "ops/row_launch.cuh"
#include "plan/cross_entropy_plan.hpp"
#include "plan/reduction_plan.hpp"
#include "reducekit/loss.hpp"
#include "reducekit/tuning.hpp"

namespace reducekit {
namespace {

Status check_options(const CrossEntropyOptions& o) {
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
    return Status::invalid_argument("label_smoothing: expected a value in [0, 1], got " +
                                    std::to_string(o.label_smoothing));
  if (!(o.softcap >= 0.0) || !std::isfinite(o.softcap))
    return Status::invalid_argument("softcap: expected 0 (none) or a finite positive value, got " +
                                    std::to_string(o.softcap));
  if (!std::isfinite(o.lse_square_scale))
    return Status::invalid_argument("lse_square_scale: expected a finite value, got " +
                                    std::to_string(o.lse_square_scale));
  return Status::ok();
}

// The rows of `t` over its last dim, which must be innermost.
Status plan_class_rows(const TensorView& t, const char* name, RowwisePlan* plan) {
  REDUCEKIT_RETURN_IF_ERROR(plan_rowwise(t, -1, plan));
  if (!plan->row_major)
    return Status::unsupported(std::string(name) + ": the class dim must be innermost (stride 1) with the other dims "
                               "mergeable into rows; make the tensor contiguous first");
  return Status::ok();
}

// The rows of `logits`, the class weights and the options: the checks of every call, whatever
// its targets.
Status plan_logit_rows(const TensorView& logits, const char* name, const TensorView* weight,
                       const CrossEntropyOptions& options, RowwisePlan* plan) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(logits, name));
  REDUCEKIT_RETURN_IF_ERROR(plan_class_rows(logits, name, plan));
  if (plan->cols == 0 && plan->rows > 0) return Status::invalid_argument(std::string(name) + ": no classes");
  if (weight != nullptr)
    REDUCEKIT_RETURN_IF_ERROR(
        check_dense_vector(*weight, "weight", accumulation_dtype(logits.dtype), plan->cols, "one per class"));
  return check_options(options);
}

// plan_logit_rows with class-index targets: int64, one per row.
Status plan_logits(const TensorView& logits, const char* name, const TensorView& target, const TensorView* weight,
                   const CrossEntropyOptions& options, RowwisePlan* plan) {
  REDUCEKIT_RETURN_IF_ERROR(plan_logit_rows(logits, name, weight, options, plan));
  return check_dense_vector(target, "target", DType::kInt64, plan->rows, "one per row");
}

// The per-row vectors of a call (loss, lse, grad_loss, ...): `rows` values each, contiguous, in
// the logits' accumulation dtype; a null view is skipped.
Status check_row_values(std::initializer_list<NamedView> vectors, const TensorView& logits, int64_t rows) {
  for (const NamedView& v : vectors)
    if (v.view != nullptr)
      REDUCEKIT_RETURN_IF_ERROR(
          check_dense_vector(*v.view, v.name, accumulation_dtype(logits.dtype), rows, "one per row"));
  return Status::ok();
}

// grad_loss: one upstream gradient a row in the logits' accumulation dtype, or one value for
// every row (a mean's upstream gradient over its denominator); *stride: the kernels' grad_stride.
Status check_grad_loss(const TensorView& grad_loss, const TensorView& logits, int64_t rows, int64_t* stride) {
  *stride = grad_loss.numel() == 1 ? 0 : 1;
  return check_dense_vector(grad_loss, "grad_loss", accumulation_dtype(logits.dtype), *stride != 0 ? rows : 1,
                            "one per row, or one for every row");
}

// dlogits: the shape and dtype of logits, rows that do not overlap; the logits themselves only
// where the kernel writes over them (`over_logits`), otherwise sharing no memory with them.
Status plan_dlogits(const TensorView& logits, const TensorView& dlogits, bool over_logits, RowwisePlan* out_plan) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(dlogits, "dlogits"));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(dlogits, "dlogits", logits, "logits"));
  REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(dlogits, "dlogits", logits, "logits"));
  if (!over_logits && dlogits.data == logits.data && logits.numel() > 0)
    return Status::unsupported("dlogits: the backward does not write over logits (cross_entropy_fused does)");
  REDUCEKIT_RETURN_IF_ERROR(plan_rowwise(dlogits, -1, out_plan));
  if (!out_plan->row_major)
    return Status::unsupported("dlogits: the class dim must be innermost (stride 1) with the other dims mergeable");
  return check_output_rows(out_plan->rows, out_plan->cols, out_plan->row_stride, "dlogits");
}

// As many CTAs as fit on the device at once (each loops over its rows), at most one a row.
template <class Kernel> int grid_for(Kernel kernel, int64_t rows) {
  int ctas = 0;
  if (!detail::resident_ctas(reinterpret_cast<const void*>(kernel), kCrossEntropyThreads, 0, &ctas).is_ok()) {
    cudaGetLastError();
    ctas = 132 * 2;
  }
  return static_cast<int>(std::min<int64_t>(rows, ctas));
}

template <typename T>
kernels::CrossEntropyArgs<T> args_of(const TensorView& logits, const RowwisePlan& plan, const TensorView& target,
                                     const TensorView* weight, const CrossEntropyOptions& o) {
  using Acc = kernels::acc_t<T>;
  kernels::CrossEntropyArgs<T> a{};
  a.logits = static_cast<const T*>(logits.data);
  a.logits_stride = plan.row_stride;
  a.target = static_cast<const int64_t*>(target.data);
  a.weight = weight != nullptr ? static_cast<const Acc*>(weight->data) : nullptr;
  a.rows = plan.rows;
  a.classes = plan.cols;
  a.ignore_index = o.ignore_index;
  a.smoothing = static_cast<Acc>(o.label_smoothing);
  a.z_scale = static_cast<Acc>(o.lse_square_scale);
  a.softcap = static_cast<Acc>(o.softcap);
  return a;
}

// 16-bit and float32 logits without label smoothing or soft-capping run on the staged kernel
// where cross_entropy_staged_bands(step) stage a row of their bytes. Float32 rows take the same bands
// by bytes: the row kernels' two passes move a step's logits three times, and shift every vector
// of a misaligned row. The choice depends on the row length, the dtype and those options alone,
// so a row's bits do not depend on the batch.
Status plan_staged(const TensorView& logits, int64_t classes, const CrossEntropyOptions& o, bool step,
                   RowKernelConfig* c, bool* staged) {
  *staged = false;
  const int elem_bytes = static_cast<int>(dtype_size(logits.dtype));
  if ((elem_bytes != 2 && elem_bytes != 4) || o.label_smoothing > 0.0 || o.softcap > 0.0 || classes > kMaxRowLength)
    return Status::ok();
  RowKernelLimits limits = row_policy(RowFamily::kRowwise, elem_bytes);
  limits.staged = cross_entropy_staged_bands(step);
  REDUCEKIT_RETURN_IF_ERROR(row_kernel_limits(&limits));
  // An override of the first band's end moves the second's start with it.
  limits.staged[1].min_row_bytes = std::min(limits.staged[1].min_row_bytes, limits.staged[0].max_row_bytes);
  *c = plan_row_kernel(classes, elem_bytes, 1, limits);
  *staged = c->kind == RowKernelKind::kStaged;
  return Status::ok();
}

template <bool kGradient, typename T>
Status launch_staged(const kernels::CrossEntropyArgs<T>& a, const RowKernelConfig& c, cudaStream_t stream,
                     const char* name, bool overlap_previous = false) {
  if constexpr (sizeof(T) <= 4) {
    REDUCEKIT_RETURN_IF_ERROR(detail::check_staged_launch(c, a.rows, "logits"));
    const auto kernel = c.threads == kStagedSmallThreads
                            ? kernels::cross_entropy_staged_kernel<T, kStagedSmallThreads, kGradient>
                            : kernels::cross_entropy_staged_kernel<T, kStagedThreads, kGradient>;
    return detail::launch_blocks_overlapping(overlap_previous, kernel, a.rows * c.cluster, c, stream, name, a);
  } else {
    return Status::unsupported("logits: staged rows are 16-bit or float32 rows");
  }
}

using detail::launch_status;

template <typename T, bool kForward, bool kExtras, int kShift> constexpr auto row_kernel() {
  if constexpr (kForward) return kernels::cross_entropy_forward_kernel<T, kExtras, kShift>;
  else return kernels::cross_entropy_backward_kernel<T, kExtras, kShift>;
}

// The row kernel for float32 rows that all start `shift` bytes into a granule, and for other
// dtypes' rows at any alignment (-1): there the aligned loop's extra registers (16-bit: 64 -> 72)
// would cost a CTA an SM.
template <typename T, bool kForward, bool kExtras> auto row_kernel_for(int shift) {
  if constexpr (sizeof(T) == 4) {
    switch (shift) {
      case 0: return row_kernel<T, kForward, kExtras, 0>();
      case 4: return row_kernel<T, kForward, kExtras, 4>();
      case 8: return row_kernel<T, kForward, kExtras, 8>();
      case 12: return row_kernel<T, kForward, kExtras, 12>();
      default: return row_kernel<T, kForward, kExtras, -1>();  // none: check_element_aligned rejects them
    }
  } else {
    (void)shift;
    return row_kernel<T, kForward, kExtras, -1>();
  }
}

// Whether every row of p starts at the same offset in a 16-byte granule as the same row of q
// (both dense alike, padded alike, or the same rows): the backward kernels then move whole aligned
// granules. Unsigned differences: mod 16 holds through their wrap-around.
template <typename T> bool same_granule_offsets(const T* p, int64_t p_stride, const T* q, int64_t q_stride) {
  const uint64_t stride_gap = (static_cast<uint64_t>(p_stride) - static_cast<uint64_t>(q_stride)) * sizeof(T);
  return stride_gap % 16 == 0 && (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(q)) % 16 == 0;
}

template <typename T, bool kForward, bool kExtras>
Status launch_split(const kernels::CrossEntropyArgs<T>& a, int chunks, cudaStream_t stream, const char* name) {
  if constexpr (kForward) {
    RowKernelConfig c;
    c.threads = kCrossEntropyThreads;
    c.smem_bytes = 0;
    c.cluster = chunks;
    return detail::launch_blocks(kernels::cross_entropy_split_forward_kernel<T, kExtras>, a.rows * chunks, c, stream,
                                 name, a);
  } else {
    kernels::cross_entropy_split_backward_kernel<T, kExtras>
        <<<static_cast<unsigned>(a.rows * chunks), kCrossEntropyThreads, 0, stream>>>(a, chunks);
    return launch_status(name);
  }
}

// The row kernels of the batch as plan_cross_entropy_rows places them (the split rows' threshold
// and the shift classes' bytes overridable by tuning).
template <typename T, bool kForward, bool kExtras>
Status launch_row_classes(const kernels::CrossEntropyArgs<T>& a, cudaStream_t stream, const char* name) {
  CrossEntropyRowsQuery q;
  q.elem_bytes = static_cast<int>(sizeof(T));
  q.rows = a.rows;
  q.classes = a.classes;
  q.row_stride = a.logits_stride;
  q.backward = !kForward;
  if constexpr (!kForward)
    q.gradient_at_logits_offsets = same_granule_offsets(a.dlogits, a.dlogits_stride, a.logits, a.logits_stride);
  q.smoothing_over_weights = a.smoothing > 0 && a.weight != nullptr;
  q.split_below_rows = tuning("cross_entropy_split_below_rows");
  q.class_launch_from_bytes = tuning("cross_entropy_classes_from_bytes");
  DeviceAttributes device;
  if (!q.split_below_rows && current_device_attributes(&device).is_ok()) q.sms = device.sms;  // else no split
  const CrossEntropyRowsPlan plan = plan_cross_entropy_rows(q);
  if (plan.kind == CrossEntropyRows::kSplit) return launch_split<T, kForward, kExtras>(a, plan.chunks, stream, name);
  if constexpr (!kForward) {
    if (plan.kind == CrossEntropyRows::kGranules) {
      const auto kernel = kernels::cross_entropy_backward_granules_kernel<T, kExtras>;
      kernel<<<grid_for(kernel, a.rows), kCrossEntropyThreads, 0, stream>>>(a);
      return launch_status(name);
    }
  }
  if (plan.kind == CrossEntropyRows::kShiftClasses) {
    for (int c = 0; c < plan.period && c < a.rows; ++c) {
      const int shift = static_cast<int>((reinterpret_cast<uintptr_t>(a.logits + c * a.logits_stride)) & 15);
      const auto kernel = row_kernel_for<T, kForward, kExtras>(shift);
      const int64_t class_rows = (a.rows - c + plan.period - 1) / plan.period;
      kernel<<<grid_for(kernel, class_rows), kCrossEntropyThreads, 0, stream>>>(a, c, plan.period);
      REDUCEKIT_RETURN_IF_ERROR(launch_status(name));
    }
    return Status::ok();
  }
  const auto kernel = row_kernel_for<T, kForward, kExtras>(-1);  // one launch, every row
  kernel<<<grid_for(kernel, a.rows), kCrossEntropyThreads, 0, stream>>>(a, 0, 1);
  return launch_status(name);
}

// The lean kernels unless label smoothing or soft-capping.
template <bool kForward, typename T>
Status launch_rows(const kernels::CrossEntropyArgs<T>& a, const CrossEntropyOptions& o, cudaStream_t stream,
                   const char* name) {
  if (o.label_smoothing > 0.0 || o.softcap > 0.0) return launch_row_classes<T, kForward, true>(a, stream, name);
  return launch_row_classes<T, kForward, false>(a, stream, name);
}

template <class Run> Status by_dtype(DType dtype, Run run) {
  switch (dtype) {
    case DType::kFloat32: return run(float{});
    case DType::kFloat16: return run(__half{});
    case DType::kBFloat16: return run(__nv_bfloat16{});
    case DType::kFloat64: return run(double{});
    default: return Status::invalid_argument("logits: unsupported dtype");
  }
}

// The rows of class-probability `target` (`name`): logits' shape and dtype, its own row stride.
Status plan_probs_rows(const TensorView& logits, const TensorView& t, const char* name, RowwisePlan* plan) {
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t, name));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(t, name, logits, "logits"));
  return plan_class_rows(t, name, plan);
}

// The checks both class-probability calls share: logits' rows, target's, and the class weights.
template <typename T>
Status plan_probs(const TensorView& logits, const TensorView& target, const TensorView* weight,
                  const CrossEntropyOptions& o, RowwisePlan* plan, kernels::ProbsArgs<T>* a) {
  REDUCEKIT_RETURN_IF_ERROR(plan_logit_rows(logits, "logits", weight, o, plan));
  RowwisePlan target_plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_probs_rows(logits, target, "target", &target_plan));
  using Acc = kernels::acc_t<T>;
  *a = {};
  a->logits = static_cast<const T*>(logits.data);
  a->logits_stride = plan->row_stride;
  a->target = static_cast<const T*>(target.data);
  a->target_stride = target_plan.row_stride;
  a->weight = weight != nullptr ? static_cast<const Acc*>(weight->data) : nullptr;
  a->rows = plan->rows;
  a->classes = plan->cols;
  a->smoothing = static_cast<Acc>(o.label_smoothing);
  a->z_scale = static_cast<Acc>(o.lse_square_scale);
  a->softcap = static_cast<Acc>(o.softcap);
  return Status::ok();
}

}  // namespace

Status cross_entropy_forward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                             const CrossEntropyOptions& options, const TensorView& loss, const TensorView& lse,
                             cudaStream_t stream) {
  RowwisePlan plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_logits(logits, "logits", target, weight, options, &plan));
  REDUCEKIT_RETURN_IF_ERROR(check_row_values({{&loss, "loss"}, {&lse, "lse"}}, logits, plan.rows));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&loss, "loss"}, {&lse, "lse"}},
                                           {{&logits, "logits"}, {&target, "target"}, {weight, "weight"}}));
  if (plan.rows == 0) return Status::ok();
  return by_dtype(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = kernels::acc_t<T>;
    kernels::CrossEntropyArgs<T> a = args_of<T>(logits, plan, target, weight, options);
    a.loss = static_cast<Acc*>(loss.data);
    a.lse = static_cast<Acc*>(lse.data);
    RowKernelConfig c;
    bool staged = false;
    REDUCEKIT_RETURN_IF_ERROR(plan_staged(logits, plan.cols, options, false, &c, &staged));
    // Alone, the forward stages only rows one CTA holds: a cluster's CTAs wait for their shares
    // and each other with nothing to write, and the row loop of the one-CTA kernel keeps more of
    // the row in flight.
    if (staged && c.cluster == 1) return launch_staged<false>(a, c, stream, "cross_entropy_forward");
    return launch_rows<true>(a, options, stream, "cross_entropy_forward");
  });
}

Status cross_entropy_backward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                              const TensorView& lse, const TensorView& grad_loss, const CrossEntropyOptions& options,
                              const TensorView& dlogits, cudaStream_t stream) {
  RowwisePlan plan, out_plan;
  REDUCEKIT_RETURN_IF_ERROR(plan_logits(logits, "logits", target, weight, options, &plan));
  int64_t grad_stride = 1;
  REDUCEKIT_RETURN_IF_ERROR(check_row_values({{&lse, "lse"}}, logits, plan.rows));
  REDUCEKIT_RETURN_IF_ERROR(check_grad_loss(grad_loss, logits, plan.rows, &grad_stride));
  REDUCEKIT_RETURN_IF_ERROR(plan_dlogits(logits, dlogits, false, &out_plan));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&dlogits, "dlogits"}}, {{&target, "target"}, {weight, "weight"},
                                                                     {&lse, "lse"}, {&grad_loss, "grad_loss"}}));
  if (plan.rows == 0) return Status::ok();
  return by_dtype(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = kernels::acc_t<T>;
    kernels::CrossEntropyArgs<T> a = args_of<T>(logits, plan, target, weight, options);
    a.saved_lse = static_cast<const Acc*>(lse.data);
    a.grad = static_cast<const Acc*>(grad_loss.data);
    a.grad_stride = grad_stride;
    a.dlogits = static_cast<T*>(dlogits.data);
    a.dlogits_stride = out_plan.row_stride;
    return launch_rows<false>(a, options, stream, "cross_entropy_backward");
  });
}

namespace {

// cross_entropy_fused's checks, apart from its launches so that a step checks everything first.
struct FusedPlan {
  RowwisePlan rows, out;
  int64_t grad_stride = 1;
};
Status plan_fused(const TensorView& logits, const TensorView& target, const TensorView* weight,
                  const TensorView& grad_loss, const CrossEntropyOptions& options, const TensorView& loss,
                  const TensorView& lse, const TensorView& dlogits, FusedPlan* p) {
  REDUCEKIT_RETURN_IF_ERROR(plan_logits(logits, "logits", target, weight, options, &p->rows));
  REDUCEKIT_RETURN_IF_ERROR(check_row_values({{&loss, "loss"}, {&lse, "lse"}}, logits, p->rows.rows));
  REDUCEKIT_RETURN_IF_ERROR(check_grad_loss(grad_loss, logits, p->rows.rows, &p->grad_stride));
  REDUCEKIT_RETURN_IF_ERROR(plan_dlogits(logits, dlogits, true, &p->out));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&loss, "loss"}, {&lse, "lse"}, {&dlogits, "dlogits"}},
                                           {{&target, "target"}, {weight, "weight"}, {&grad_loss, "grad_loss"}}));
  return check_disjoint({{&loss, "loss"}, {&lse, "lse"}}, {{&logits, "logits"}});
}

// overlap_previous: staged rows start before the kernel ahead ends (launch_staged), which the
// library launched itself; they wait for it before reading grad_loss.
Status launch_fused(const TensorView& logits, const TensorView& target, const TensorView* weight,
                    const TensorView& grad_loss, const CrossEntropyOptions& options, const TensorView& loss,
                    const TensorView& lse, const TensorView& dlogits, const FusedPlan& p, cudaStream_t stream,
                    bool overlap_previous) {
  if (p.rows.rows == 0) return Status::ok();
  return by_dtype(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = kernels::acc_t<T>;
    kernels::CrossEntropyArgs<T> a = args_of<T>(logits, p.rows, target, weight, options);
    a.loss = static_cast<Acc*>(loss.data);
    a.lse = static_cast<Acc*>(lse.data);
    a.grad = static_cast<const Acc*>(grad_loss.data);
    a.grad_stride = p.grad_stride;
    a.dlogits = static_cast<T*>(dlogits.data);
    a.dlogits_stride = p.out.row_stride;
    RowKernelConfig c;
    bool staged = false;
    REDUCEKIT_RETURN_IF_ERROR(plan_staged(logits, p.rows.cols, options, true, &c, &staged));
    if (staged) return launch_staged<true>(a, c, stream, "cross_entropy_fused", overlap_previous);
    // Other rows: the forward kernel, then the backward kernel over the lse it wrote (faster than
    // one kernel doing both, whose CTAs held twice the registers and re-read the row from L2).
    a.saved_lse = a.lse;
    REDUCEKIT_RETURN_IF_ERROR(launch_rows<true>(a, options, stream, "cross_entropy_fused"));
    return launch_rows<false>(a, options, stream, "cross_entropy_fused");
  });
}

}  // namespace

Status cross_entropy_fused(const TensorView& logits, const TensorView& target, const TensorView* weight,
                           const TensorView& grad_loss, const CrossEntropyOptions& options, const TensorView& loss,
                           const TensorView& lse, const TensorView& dlogits, cudaStream_t stream) {
  FusedPlan p;
  REDUCEKIT_RETURN_IF_ERROR(plan_fused(logits, target, weight, grad_loss, options, loss, lse, dlogits, &p));
  return launch_fused(logits, target, weight, grad_loss, options, loss, lse, dlogits, p, stream, false);
}

Status cross_entropy_probs_forward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                                   const CrossEntropyOptions& options, const TensorView& loss, const TensorView& lse,
                                   const TensorView& mass, cudaStream_t stream) {
  return by_dtype(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = kernels::acc_t<T>;
    RowwisePlan plan;
    kernels::ProbsArgs<T> a;
    REDUCEKIT_RETURN_IF_ERROR(plan_probs<T>(logits, target, weight, options, &plan, &a));
    REDUCEKIT_RETURN_IF_ERROR(check_row_values({{&loss, "loss"}, {&lse, "lse"}, {&mass, "mass"}}, logits, plan.rows));
    REDUCEKIT_RETURN_IF_ERROR(
        check_disjoint({{&loss, "loss"}, {&lse, "lse"}, {&mass, "mass"}},
                       {{&logits, "logits"}, {&target, "target"}, {weight, "weight"}}));
    if (plan.rows == 0) return Status::ok();
    a.loss = static_cast<Acc*>(loss.data);
    a.lse = static_cast<Acc*>(lse.data);
    a.mass = static_cast<Acc*>(mass.data);
    // 16-bit rows off their granules read each granule once a warp, the others prefetch: the same
    // bits, each form in its own kernel's registers.
    const auto kernel = [&] {
      if constexpr (sizeof(T) == 2) {
        const bool on_granules = rows_on_granules(a.logits, a.rows, a.logits_stride, 2) &&
                                 rows_on_granules(a.target, a.rows, a.target_stride, 2);
        if (!on_granules && tuning("cross_entropy_probs_shared_granules").value_or(1) != 0)
          return kernels::cross_entropy_probs_forward_kernel<T, true>;
      }
      return kernels::cross_entropy_probs_forward_kernel<T, false>;
    }();
    kernel<<<grid_for(kernel, a.rows), kernels::kProbsThreads, 0, stream>>>(a);
    return launch_status("cross_entropy_probs_forward");
  });
}

Status cross_entropy_probs_backward(const TensorView& logits, const TensorView& target, const TensorView* weight,
                                    const TensorView& lse, const TensorView& mass, const TensorView& grad_loss,
                                    const CrossEntropyOptions& options, const TensorView& dlogits,
                                    const TensorView* dtarget, cudaStream_t stream) {
  return by_dtype(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = kernels::acc_t<T>;
    RowwisePlan plan, out_plan, target_out_plan;
    kernels::ProbsArgs<T> a;
    REDUCEKIT_RETURN_IF_ERROR(plan_probs<T>(logits, target, weight, options, &plan, &a));
    int64_t grad_stride = 1;
    REDUCEKIT_RETURN_IF_ERROR(check_row_values({{&lse, "lse"}, {&mass, "mass"}}, logits, plan.rows));
    REDUCEKIT_RETURN_IF_ERROR(check_grad_loss(grad_loss, logits, plan.rows, &grad_stride));
    REDUCEKIT_RETURN_IF_ERROR(plan_dlogits(logits, dlogits, false, &out_plan));
    REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&dlogits, "dlogits"}, {dtarget, "dtarget"}},
                                             {{&target, "target"}, {weight, "weight"}, {&lse, "lse"},
                                              {&mass, "mass"}, {&grad_loss, "grad_loss"}}));
    if (dtarget != nullptr) {
      REDUCEKIT_RETURN_IF_ERROR(plan_probs_rows(logits, *dtarget, "dtarget", &target_out_plan));
      REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{dtarget, "dtarget"}}, {{&logits, "logits"}}));
      REDUCEKIT_RETURN_IF_ERROR(
          check_output_rows(target_out_plan.rows, target_out_plan.cols, target_out_plan.row_stride, "dtarget"));
    }
    if (plan.rows == 0) return Status::ok();
    a.saved_lse = static_cast<const Acc*>(lse.data);
    a.saved_mass = static_cast<const Acc*>(mass.data);
    a.grad = static_cast<const Acc*>(grad_loss.data);
    a.grad_stride = grad_stride;
    a.dlogits = static_cast<T*>(dlogits.data);
    a.dlogits_stride = out_plan.row_stride;
    if (dtarget != nullptr) {
      a.dtarget = static_cast<T*>(dtarget->data);
      a.dtarget_stride = target_out_plan.row_stride;
    }
    const auto at_logits_offsets = [&](const T* p, int64_t stride) {
      return same_granule_offsets(p, stride, a.logits, a.logits_stride);
    };
    const bool granules = at_logits_offsets(a.target, a.target_stride) &&
                          at_logits_offsets(a.dlogits, a.dlogits_stride) &&
                          (a.dtarget == nullptr || at_logits_offsets(a.dtarget, a.dtarget_stride));
    const auto kernel = granules ? kernels::cross_entropy_probs_backward_kernel<T, true>
                                 : kernels::cross_entropy_probs_backward_kernel<T, false>;
    kernel<<<grid_for(kernel, a.rows), kernels::kProbsThreads, 0, stream>>>(a);
    return launch_status("cross_entropy_probs_backward");
  });
}

namespace {

Status check_reduce(const TensorView* loss, const TensorView* target, const TensorView* weight,
                    LossReduction reduction, const TensorView& out, const TensorView* denominator) {
  if (reduction != LossReduction::kSum && reduction != LossReduction::kMean)
    return Status::invalid_argument("reduction: expected kSum or kMean");
  if (loss == nullptr && target == nullptr) return Status::invalid_argument("loss: null, and so is target");
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(out, "out"));
  const DType acc = accumulation_dtype(out.dtype);
  REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(out, "out", out.dtype, 1, "one value"));
  const int64_t rows = target != nullptr ? target->numel() : loss->numel();
  if (target != nullptr)
    REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(*target, "target", DType::kInt64, rows, "one per row"));
  if (loss != nullptr) REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(*loss, "loss", acc, rows, "one per target"));
  if (weight != nullptr) {
    if (target == nullptr)
      return Status::invalid_argument("weight: class weights go with class-index targets (a class-probability "
                                      "mean divides by the rows)");
    REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(*weight, "weight", acc, weight->numel(), "one per class"));
    if (weight->numel() == 0) return Status::invalid_argument("weight: no classes");
  }
  if (denominator != nullptr)
    REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(*denominator, "denominator", acc, 1, "one value"));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&out, "out"}, {denominator, "denominator"}},
                                           {{loss, "loss"}, {target, "target"}, {weight, "weight"}}));
  return Status::ok();
}

// overlap_previous: the kernel may start before the one ahead of it ends (the library's own, and
// writing none of target and weight): it waits for it before reading loss.
Status launch_reduce(const TensorView* loss, const TensorView* target, const TensorView* weight, int64_t ignore_index,
                     LossReduction reduction, const TensorView& out, const TensorView* denominator,
                     cudaStream_t stream, double numerator, bool overlap_previous) {
  const int64_t rows = target != nullptr ? target->numel() : loss->numel();
  return by_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = kernels::acc_t<T>;
    kernels::CrossEntropyReduceArgs<T> a{};
    a.loss = loss != nullptr ? static_cast<const Acc*>(loss->data) : nullptr;
    a.target = target != nullptr ? static_cast<const int64_t*>(target->data) : nullptr;
    a.weight = weight != nullptr ? static_cast<const Acc*>(weight->data) : nullptr;
    a.classes = weight != nullptr ? weight->numel() : 0;
    a.rows = rows;
    a.ignore_index = ignore_index;
    a.mean = reduction == LossReduction::kMean;
    a.numerator = static_cast<Acc>(numerator);
    a.out = static_cast<T*>(out.data);
    a.denominator = denominator != nullptr ? static_cast<Acc*>(denominator->data) : nullptr;
    if (!overlap_previous) {
      kernels::cross_entropy_reduce_kernel<T><<<1, kernels::kCrossEntropyReduceThreads, 0, stream>>>(a);
      return launch_status("cross_entropy_reduce");
    }
    cudaLaunchAttribute overlap = detail::overlap_previous_attribute();
    return detail::launch_with_attributes(kernels::cross_entropy_reduce_kernel<T>, 1,
                                          kernels::kCrossEntropyReduceThreads, 0, stream, &overlap, 1,
                                          "cross_entropy_reduce", a);
  });
}

}  // namespace

Status cross_entropy_reduce(const TensorView* loss, const TensorView* target, const TensorView* weight,
                            int64_t ignore_index, LossReduction reduction, const TensorView& out,
                            const TensorView* denominator, cudaStream_t stream, double numerator) {
  REDUCEKIT_RETURN_IF_ERROR(check_reduce(loss, target, weight, reduction, out, denominator));
  return launch_reduce(loss, target, weight, ignore_index, reduction, out, denominator, stream, numerator, false);
}

Status cross_entropy_step(const TensorView& logits, const TensorView& target, const TensorView* weight,
                          const CrossEntropyOptions& options, LossReduction reduction, double grad_scale,
                          const TensorView& out, const TensorView& loss, const TensorView& lse,
                          const TensorView& grad_loss, const TensorView& dlogits, cudaStream_t stream) {
  if (reduction != LossReduction::kSum && reduction != LossReduction::kMean)
    return Status::invalid_argument("reduction: expected kSum or kMean (a step of per-row losses is "
                                    "cross_entropy_fused)");
  // Every check before the first launch: a bad argument launches nothing.
  REDUCEKIT_RETURN_IF_ERROR(check_dense_vector(grad_loss, "grad_loss", accumulation_dtype(logits.dtype), 1,
                                               "one value"));
  FusedPlan p;
  REDUCEKIT_RETURN_IF_ERROR(plan_fused(logits, target, weight, grad_loss, options, loss, lse, dlogits, &p));
  REDUCEKIT_RETURN_IF_ERROR(check_reduce(nullptr, &target, weight, reduction, grad_loss, nullptr));
  REDUCEKIT_RETURN_IF_ERROR(check_reduce(&loss, &target, weight, reduction, out, nullptr));
  REDUCEKIT_RETURN_IF_ERROR(check_disjoint({{&out, "out"}}, {{&logits, "logits"}, {&dlogits, "dlogits"},
                                                             {&lse, "lse"}, {&grad_loss, "grad_loss"}}));
  // grad_loss = grad_scale / the mean's denominator (grad_scale for kSum: over 1), then the fused
  // kernel and the losses' reduce, each started behind the one ahead (it waits for what it reads).
  REDUCEKIT_RETURN_IF_ERROR(
      launch_reduce(nullptr, &target, weight, options.ignore_index, reduction, grad_loss, nullptr, stream, grad_scale,
                    false));
  REDUCEKIT_RETURN_IF_ERROR(launch_fused(logits, target, weight, grad_loss, options, loss, lse, dlogits, p, stream,
                                         true));
  return launch_reduce(&loss, &target, weight, options.ignore_index, reduction, out, nullptr, stream, 0.0, true);
}

}  // namespace reducekit
