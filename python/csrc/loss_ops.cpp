// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit cross-entropy: per-row loss and logsumexp over the last dim of logits, the
// gradient of the per-row losses, and both in one kernel (cross_entropy_fused, _ over the logits);
// a 'mean' / 'sum' training step in one call (cross_entropy_step, _ over the logits);
// torch's 'mean' or 'sum' of the losses with the forward in one op (cross_entropy_loss; its
// autograd is in loss_autograd.cpp) or of losses already computed (cross_entropy_reduce); for
// class-probability targets, cross_entropy_probs_forward / _backward / _loss.
// Thin: outputs come from torch's caching allocator, logits the core cannot read in place
// (kUnsupported) are retried as a contiguous copy (with_layout_fallback, torch_util.hpp), class
// weights are cast to the per-row values' dtype, and every check lives in the core.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "reducekit/reducekit.hpp"
#include "torch_util.hpp"

namespace {

using reducekit_torch::check_cuda;
using reducekit_torch::throw_if_failed;
using reducekit_torch::device_empty;
using reducekit_torch::given;
using reducekit_torch::Operand;
using reducekit_torch::to_view;
using reducekit_torch::with_layout_fallback;

at::ScalarType row_value_type(at::ScalarType dtype) { return dtype == at::kDouble ? at::kDouble : at::kFloat; }
at::ScalarType row_value_type(const at::Tensor& logits) { return row_value_type(logits.scalar_type()); }

reducekit::CrossEntropyOptions options_of(int64_t ignore_index, double label_smoothing, double lse_square_scale,
                                          double softcap) {
  reducekit::CrossEntropyOptions o;
  o.ignore_index = ignore_index;
  o.label_smoothing = label_smoothing;
  o.lse_square_scale = lse_square_scale;
  o.softcap = softcap;
  return o;
}

// One value per row: logits' leading dims.
std::vector<int64_t> row_shape(const at::Tensor& logits) {
  return std::vector<int64_t>(logits.sizes().begin(), logits.sizes().end() - (logits.dim() > 0 ? 1 : 0));
}

struct Inputs {
  at::Tensor target, weight;
  reducekit::TensorView target_view, weight_view;
  bool has_weight = false;
  // t: int64 class indices, or none (class-probability targets pass theirs apart); w is cast to
  // the per-row values' dtype of `values` (float32, float64 for float64: row_value_type).
  Inputs(at::ScalarType values, const std::optional<at::Tensor>& t, const std::optional<at::Tensor>& w) {
    if (t.has_value()) {
      check_cuda(*t, "target");
      TORCH_CHECK(t->scalar_type() == at::kLong, "target: expected int64 class indices, got ", t->scalar_type());
      target = t->contiguous();
      target_view = to_view(target, "target");
    }
    if (given(w)) {
      check_cuda(*w, "weight");
      weight = w->to(values).contiguous();
      weight_view = to_view(weight, "weight");
      has_weight = true;
    }
  }
  const reducekit::TensorView* weight_ptr() const { return has_weight ? &weight_view : nullptr; }
  const reducekit::TensorView* target_ptr() const { return target.defined() ? &target_view : nullptr; }
};

// Each row's loss and lse (the caller holds the device guard).
std::tuple<at::Tensor, at::Tensor> row_losses(const at::Tensor& logits, const Inputs& in,
                                              const reducekit::CrossEntropyOptions& o, cudaStream_t stream) {
  const auto options = logits.options().dtype(row_value_type(logits));
  at::Tensor loss = device_empty(row_shape(logits), options), lse = device_empty(row_shape(logits), options);
  with_layout_fallback({Operand::in(logits)}, [&](const auto& t, bool) {
    return reducekit::cross_entropy_forward(to_view(t[0], "logits"), in.target_view, in.weight_ptr(), o,
                                            to_view(loss, "loss"), to_view(lse, "lse"), stream);
  });
  return {loss, lse};
}

std::tuple<at::Tensor, at::Tensor> cross_entropy_forward_cuda(const at::Tensor& logits, const at::Tensor& target,
                                                              const std::optional<at::Tensor>& weight,
                                                              int64_t ignore_index, double label_smoothing,
                                                              double lse_square_scale, double softcap) {
  check_cuda(logits, "logits");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  return row_losses(logits, Inputs(row_value_type(logits), target, weight),
                    options_of(ignore_index, label_smoothing, lse_square_scale, softcap), stream);
}

reducekit::LossReduction reduction_of(c10::string_view reduction) {
  if (reduction == "mean") return reducekit::LossReduction::kMean;
  TORCH_CHECK(reduction == "sum", "reduction: expected 'mean' or 'sum' (per-row losses: cross_entropy_forward), got '",
              reduction, "'");
  return reducekit::LossReduction::kSum;
}

// out (0-dim, `dtype`) and the mean's denominator (0-dim, the losses' dtype; 1 for 'sum') by
// cross_entropy_reduce over the class-index targets and weights of `in`, or over the rows where
// `in` holds no targets (class probabilities); loss undefined: the denominator alone (out 0).
// The caller holds the device guard.
std::tuple<at::Tensor, at::Tensor> reduce_rows(const at::Tensor& loss, const Inputs& in, int64_t ignore_index,
                                               reducekit::LossReduction how, at::ScalarType dtype,
                                               cudaStream_t stream) {
  const at::TensorOptions options = (loss.defined() ? loss : in.target).options().dtype(dtype);
  const std::vector<int64_t> scalar;
  at::Tensor out = device_empty(scalar, options);
  at::Tensor denominator = device_empty(scalar, options.dtype(row_value_type(dtype)));
  const reducekit::TensorView denominator_view = to_view(denominator, "denominator");
  const at::Tensor rows = loss.defined() ? loss.reshape(-1) : loss;
  const reducekit::TensorView loss_view = rows.defined() ? to_view(rows, "loss") : reducekit::TensorView{};
  const reducekit::TensorView* target = in.target_ptr();
  throw_if_failed(reducekit::cross_entropy_reduce(rows.defined() ? &loss_view : nullptr, target,
                                                  target != nullptr ? in.weight_ptr() : nullptr, ignore_index, how,
                                                  to_view(out, "out"), &denominator_view, stream));
  return {out, denominator};
}

// The reduced loss (0-dim, the logits' dtype), each row's lse and the mean's denominator: the
// forward's kernel, then cross_entropy_reduce's. lse and the denominator are what the backward
// reads (cross_entropy_backward with grad / denominator for every row: loss_autograd.cpp).
std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy_loss_cuda(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight, int64_t ignore_index,
    c10::string_view reduction, double label_smoothing, double lse_square_scale, double softcap) {
  const reducekit::LossReduction how = reduction_of(reduction);  // checked before any launch
  check_cuda(logits, "logits");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  const Inputs in(row_value_type(logits), target, weight);
  auto [loss, lse] =
      row_losses(logits, in, options_of(ignore_index, label_smoothing, lse_square_scale, softcap), stream);
  auto [out, denominator] = reduce_rows(loss, in, ignore_index, how, logits.scalar_type(), stream);
  return {out, lse, denominator};
}

// torch's 'mean' / 'sum' of per-row losses already computed (loss: cross_entropy_forward's or
// cross_entropy_fused's), as out in `dtype`; loss None: the denominator alone.
std::tuple<at::Tensor, at::Tensor> cross_entropy_reduce_cuda(const std::optional<at::Tensor>& loss,
                                                             const at::Tensor& target,
                                                             const std::optional<at::Tensor>& weight,
                                                             int64_t ignore_index, c10::string_view reduction,
                                                             at::ScalarType dtype) {
  check_cuda(target, "target");
  TORCH_CHECK(at::isFloatingType(dtype), "dtype: expected a floating-point dtype, got ", dtype);
  const c10::cuda::CUDAGuard guard(target.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(target.get_device()).stream();
  const Inputs in(row_value_type(dtype), target, weight);
  at::Tensor rows;
  if (given(loss)) {
    check_cuda(*loss, "loss");
    rows = loss->contiguous();
  }
  return reduce_rows(rows, in, ignore_index, reduction_of(reduction), dtype, stream);
}

at::Tensor cross_entropy_backward_cuda(const at::Tensor& logits, const at::Tensor& target,
                                       const std::optional<at::Tensor>& weight, const at::Tensor& lse,
                                       const at::Tensor& grad_loss, int64_t ignore_index, double label_smoothing,
                                       double lse_square_scale, double softcap) {
  check_cuda(logits, "logits");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  const Inputs in(row_value_type(logits), target, weight);
  const at::Tensor lse_c = lse.contiguous(), grad_c = grad_loss.to(row_value_type(logits)).contiguous();
  at::Tensor dlogits = device_empty(logits.sizes(), logits.options());
  const auto o = options_of(ignore_index, label_smoothing, lse_square_scale, softcap);
  with_layout_fallback({Operand::in(logits)}, [&](const auto& t, bool) {
    return reducekit::cross_entropy_backward(to_view(t[0], "logits"), in.target_view, in.weight_ptr(),
                                             to_view(lse_c, "lse"), to_view(grad_c, "grad_loss"), o,
                                             to_view(dlogits, "dlogits"), stream);
  });
  return dlogits;
}

// What both fused ops share: the stream, the targets and weights, loss and lse, the upstream
// gradient in the per-row values' dtype; run(x, dlogits) calls the core over logits x.
struct FusedCall {
  const c10::cuda::CUDAGuard guard;
  const cudaStream_t stream;
  const Inputs in;
  at::Tensor loss, lse, grad;
  reducekit::CrossEntropyOptions options;
  FusedCall(const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
            const at::Tensor& grad_loss, int64_t ignore_index, double label_smoothing, double lse_square_scale,
            double softcap)
      : guard((check_cuda(logits, "logits"), logits.device())),
        stream(c10::cuda::getCurrentCUDAStream(logits.get_device()).stream()),
        in(row_value_type(logits), target, weight),
        loss(device_empty(row_shape(logits), logits.options().dtype(row_value_type(logits)))),
        lse(device_empty(loss.sizes(), loss.options())),
        grad(grad_loss.to(row_value_type(logits)).contiguous()),
        options(options_of(ignore_index, label_smoothing, lse_square_scale, softcap)) {}
  reducekit::Status run(const at::Tensor& x, const reducekit::TensorView& dlogits) const {
    return reducekit::cross_entropy_fused(to_view(x, "logits"), in.target_view, in.weight_ptr(), to_view(grad, "grad_loss"),
                                          options, to_view(loss, "loss"), to_view(lse, "lse"), dlogits, stream);
  }
};

// loss, lse and dlogits in one call (grad_loss: each row's upstream gradient, known before).
std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy_fused_cuda(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    const at::Tensor& grad_loss, int64_t ignore_index, double label_smoothing, double lse_square_scale,
    double softcap) {
  const FusedCall call(logits, target, weight, grad_loss, ignore_index, label_smoothing, lse_square_scale, softcap);
  at::Tensor dlogits = device_empty(logits.sizes(), logits.options());
  with_layout_fallback({Operand::in(logits)},
                       [&](const auto& t, bool) { return call.run(t[0], to_view(dlogits, "dlogits")); });
  return {call.loss, call.lse, dlogits};
}

// As cross_entropy_fused, the gradient written over the logits (no tensor of their size more).
// Logits the core cannot address in place are computed on a contiguous copy and copied back.
std::tuple<at::Tensor, at::Tensor> cross_entropy_fused_inplace_cuda(
    at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    const at::Tensor& grad_loss, int64_t ignore_index, double label_smoothing, double lse_square_scale,
    double softcap) {
  const FusedCall call(logits, target, weight, grad_loss, ignore_index, label_smoothing, lse_square_scale, softcap);
  with_layout_fallback({Operand::in_out(logits)},
                       [&](const auto& t, bool) { return call.run(t[0], to_view(t[0], "logits")); });
  return {call.loss, call.lse};
}

// torch's 'mean' / 'sum' training step in one call (reducekit::cross_entropy_step): the reduced
// loss (0-dim, the logits' dtype) and d(grad_scale * loss) / d(logits), written into `dlogits`
// (logits itself for the in-place op). The layout fallback copies before the step's first launch,
// so its three kernels follow one another with nothing of another's between them.
at::Tensor step_into(const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                     int64_t ignore_index, c10::string_view reduction, double label_smoothing,
                     double lse_square_scale, double softcap, double grad_scale, at::Tensor* dlogits) {
  const reducekit::LossReduction how = reduction_of(reduction);  // checked before any launch
  check_cuda(logits, "logits");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  const Inputs in(row_value_type(logits), target, weight);
  const auto values = logits.options().dtype(row_value_type(logits));
  const at::Tensor loss = device_empty(row_shape(logits), values), lse = device_empty(row_shape(logits), values);
  const at::Tensor grad_loss = device_empty(std::vector<int64_t>{1}, values);
  at::Tensor out = device_empty(std::vector<int64_t>{}, logits.options());
  const auto o = options_of(ignore_index, label_smoothing, lse_square_scale, softcap);
  const bool inplace = dlogits == nullptr;
  with_layout_fallback({inplace ? Operand::in_out(logits) : Operand::in(logits)}, [&](const auto& t, bool) {
    return reducekit::cross_entropy_step(to_view(t[0], "logits"), in.target_view, in.weight_ptr(), o, how, grad_scale,
                                         to_view(out, "out"), to_view(loss, "loss"), to_view(lse, "lse"),
                                         to_view(grad_loss, "grad_loss"),
                                         inplace ? to_view(t[0], "logits") : to_view(*dlogits, "dlogits"), stream);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> cross_entropy_step_cuda(const at::Tensor& logits, const at::Tensor& target,
                                                           const std::optional<at::Tensor>& weight,
                                                           int64_t ignore_index, c10::string_view reduction,
                                                           double label_smoothing, double lse_square_scale,
                                                           double softcap, double grad_scale) {
  check_cuda(logits, "logits");
  at::Tensor dlogits = device_empty(logits.sizes(), logits.options());
  at::Tensor out = step_into(logits, target, weight, ignore_index, reduction, label_smoothing, lse_square_scale,
                             softcap, grad_scale, &dlogits);
  return {out, dlogits};
}

// As cross_entropy_step, the gradient written over the logits.
at::Tensor cross_entropy_step_inplace_cuda(at::Tensor& logits, const at::Tensor& target,
                                           const std::optional<at::Tensor>& weight, int64_t ignore_index,
                                           c10::string_view reduction, double label_smoothing,
                                           double lse_square_scale, double softcap, double grad_scale) {
  return step_into(logits, target, weight, ignore_index, reduction, label_smoothing, lse_square_scale, softcap,
                   grad_scale, nullptr);
}

// Class-probability targets (target: logits' shape and dtype): loss, lse and mass per row (the
// caller holds the device guard).
std::tuple<at::Tensor, at::Tensor, at::Tensor> probs_row_values(const at::Tensor& logits, const at::Tensor& target,
                                                                const Inputs& in,
                                                                const reducekit::CrossEntropyOptions& o,
                                                                cudaStream_t stream) {
  const auto options = logits.options().dtype(row_value_type(logits));
  at::Tensor loss = device_empty(row_shape(logits), options), lse = device_empty(row_shape(logits), options);
  at::Tensor mass = device_empty(row_shape(logits), options);
  with_layout_fallback({Operand::in(logits), Operand::in(target)}, [&](const auto& t, bool) {
    return reducekit::cross_entropy_probs_forward(to_view(t[0], "logits"), to_view(t[1], "target"), in.weight_ptr(), o,
                                                  to_view(loss, "loss"), to_view(lse, "lse"), to_view(mass, "mass"),
                                                  stream);
  });
  return {loss, lse, mass};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy_probs_forward_cuda(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    double label_smoothing, double lse_square_scale, double softcap) {
  check_cuda(logits, "logits");
  check_cuda(target, "target");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  return probs_row_values(logits, target, Inputs(row_value_type(logits), std::nullopt, weight),
                          options_of(-100, label_smoothing, lse_square_scale, softcap), stream);
}

// torch's 'mean' (over the rows) or 'sum' of the class-probability losses (0-dim, in `dtype`:
// torch's promotion of the logits', the target's and the weights'; the logits' where none), each
// row's lse and mass, and the mean's denominator: what cross_entropy_loss is for
// class indices (its backward, cross_entropy_probs_backward with grad / denominator for every
// row, is in loss_autograd.cpp).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> cross_entropy_probs_loss_cuda(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    c10::string_view reduction, double label_smoothing, double lse_square_scale, double softcap,
    std::optional<at::ScalarType> dtype) {
  const at::ScalarType out_dtype = dtype.value_or(logits.scalar_type());
  TORCH_CHECK(row_value_type(out_dtype) == row_value_type(logits),
              "dtype: expected one whose accumulation dtype is the logits' (", row_value_type(logits), "), got ",
              out_dtype);
  const reducekit::LossReduction how = reduction_of(reduction);  // checked before any launch
  check_cuda(logits, "logits");
  check_cuda(target, "target");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  const Inputs in(row_value_type(logits), std::nullopt, weight);
  auto [loss, lse, mass] =
      probs_row_values(logits, target, in, options_of(-100, label_smoothing, lse_square_scale, softcap), stream);
  auto [out, denominator] = reduce_rows(loss, in, -100, how, out_dtype, stream);
  return {out, lse, mass, denominator};
}

// dlogits, and dtarget where target_grad (else an empty tensor).
std::tuple<at::Tensor, at::Tensor> cross_entropy_probs_backward_cuda(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight, const at::Tensor& lse,
    const at::Tensor& mass, const at::Tensor& grad_loss, double label_smoothing, double lse_square_scale,
    double softcap, bool target_grad) {
  check_cuda(logits, "logits");
  check_cuda(target, "target");
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.get_device()).stream();
  const Inputs in(row_value_type(logits), std::nullopt, weight);
  const at::Tensor lse_c = lse.contiguous(), mass_c = mass.contiguous();
  const at::Tensor grad_c = grad_loss.to(row_value_type(logits)).contiguous();
  at::Tensor dlogits = device_empty(logits.sizes(), logits.options());
  const std::vector<int64_t> no_elements{0};
  at::Tensor dtarget = device_empty(target_grad ? logits.sizes() : at::IntArrayRef(no_elements), logits.options());
  const auto o = options_of(-100, label_smoothing, lse_square_scale, softcap);
  with_layout_fallback({Operand::in(logits), Operand::in(target)}, [&](const auto& t, bool) {
    const reducekit::TensorView dtarget_view = to_view(dtarget, "dtarget");
    return reducekit::cross_entropy_probs_backward(to_view(t[0], "logits"), to_view(t[1], "target"), in.weight_ptr(),
                                                   to_view(lse_c, "lse"), to_view(mass_c, "mass"),
                                                   to_view(grad_c, "grad_loss"), o, to_view(dlogits, "dlogits"),
                                                   target_grad ? &dtarget_view : nullptr, stream);
  });
  return {dlogits, dtarget};
}

// CPU logits get the core's clear message, not a dispatcher error.
std::tuple<at::Tensor, at::Tensor> reject_cpu_forward(const at::Tensor& logits, const at::Tensor&,
                                                      const std::optional<at::Tensor>&, int64_t, double, double,
                                                      double) {
  check_cuda(logits, "logits");
  return {logits, logits};
}
at::Tensor reject_cpu_backward(const at::Tensor& logits, const at::Tensor&, const std::optional<at::Tensor>&,
                               const at::Tensor&, const at::Tensor&, int64_t, double, double, double) {
  check_cuda(logits, "logits");
  return logits;
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> reject_cpu_fused(const at::Tensor& logits, const at::Tensor&,
                                                                const std::optional<at::Tensor>&, const at::Tensor&,
                                                                int64_t, double, double, double) {
  check_cuda(logits, "logits");
  return {logits, logits, logits};
}
std::tuple<at::Tensor, at::Tensor> reject_cpu_fused_inplace(at::Tensor& logits, const at::Tensor&,
                                                            const std::optional<at::Tensor>&, const at::Tensor&,
                                                            int64_t, double, double, double) {
  check_cuda(logits, "logits");
  return {logits, logits};
}

std::tuple<at::Tensor, at::Tensor> reject_cpu_step(const at::Tensor& logits, const at::Tensor&,
                                                   const std::optional<at::Tensor>&, int64_t, c10::string_view, double,
                                                   double, double, double) {
  check_cuda(logits, "logits");
  return {logits, logits};
}

at::Tensor reject_cpu_step_inplace(at::Tensor& logits, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                                   c10::string_view, double, double, double, double) {
  check_cuda(logits, "logits");
  return logits;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> reject_cpu_loss(const at::Tensor& logits, const at::Tensor&,
                                                               const std::optional<at::Tensor>&, int64_t,
                                                               c10::string_view, double, double, double) {
  check_cuda(logits, "logits");
  return {logits, logits, logits};
}

std::tuple<at::Tensor, at::Tensor> reject_cpu_reduce(const std::optional<at::Tensor>&, const at::Tensor& target,
                                                     const std::optional<at::Tensor>&, int64_t, c10::string_view,
                                                     at::ScalarType) {
  check_cuda(target, "target");
  return {target, target};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> reject_cpu_probs_loss(const at::Tensor& logits,
                                                                                const at::Tensor&,
                                                                                const std::optional<at::Tensor>&,
                                                                                c10::string_view, double, double,
                                                                                double,
                                                                                std::optional<at::ScalarType>) {
  check_cuda(logits, "logits");
  return {logits, logits, logits, logits};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> reject_cpu_probs_forward(const at::Tensor& logits, const at::Tensor&,
                                                                        const std::optional<at::Tensor>&, double,
                                                                        double, double) {
  check_cuda(logits, "logits");
  return {logits, logits, logits};
}
std::tuple<at::Tensor, at::Tensor> reject_cpu_probs_backward(const at::Tensor& logits, const at::Tensor&,
                                                             const std::optional<at::Tensor>&, const at::Tensor&,
                                                             const at::Tensor&, const at::Tensor&, double, double,
                                                             double, bool) {
  check_cuda(logits, "logits");
  return {logits, logits};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(reducekit, m) {
  m.def("cross_entropy_forward(Tensor logits, Tensor target, Tensor? weight=None, int ignore_index=-100,"
        " float label_smoothing=0.0, float lse_square_scale=0.0, float softcap=0.0) -> (Tensor, Tensor)");
  m.def("cross_entropy_backward(Tensor logits, Tensor target, Tensor? weight, Tensor lse, Tensor grad_loss,"
        " int ignore_index, float label_smoothing, float lse_square_scale, float softcap) -> Tensor");
  m.def("cross_entropy_loss(Tensor logits, Tensor target, Tensor? weight=None, int ignore_index=-100,"
        " str reduction='mean', float label_smoothing=0.0, float lse_square_scale=0.0, float softcap=0.0)"
        " -> (Tensor, Tensor, Tensor)");
  m.def("cross_entropy_reduce(Tensor? loss, Tensor target, Tensor? weight, int ignore_index, str reduction,"
        " ScalarType dtype) -> (Tensor, Tensor)");
  m.def("cross_entropy_fused(Tensor logits, Tensor target, Tensor? weight, Tensor grad_loss, int ignore_index,"
        " float label_smoothing, float lse_square_scale, float softcap) -> (Tensor, Tensor, Tensor)");
  m.def("cross_entropy_fused_(Tensor(a!) logits, Tensor target, Tensor? weight, Tensor grad_loss, int ignore_index,"
        " float label_smoothing, float lse_square_scale, float softcap) -> (Tensor, Tensor)");
  m.def("cross_entropy_step(Tensor logits, Tensor target, Tensor? weight, int ignore_index, str reduction,"
        " float label_smoothing, float lse_square_scale, float softcap, float grad_scale) -> (Tensor, Tensor)");
  m.def("cross_entropy_step_(Tensor(a!) logits, Tensor target, Tensor? weight, int ignore_index, str reduction,"
        " float label_smoothing, float lse_square_scale, float softcap, float grad_scale) -> Tensor");
  m.def("cross_entropy_probs_forward(Tensor logits, Tensor target, Tensor? weight=None, float label_smoothing=0.0,"
        " float lse_square_scale=0.0, float softcap=0.0) -> (Tensor, Tensor, Tensor)");
  m.def("cross_entropy_probs_loss(Tensor logits, Tensor target, Tensor? weight=None, str reduction='mean',"
        " float label_smoothing=0.0, float lse_square_scale=0.0, float softcap=0.0, ScalarType? dtype=None)"
        " -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("cross_entropy_probs_backward(Tensor logits, Tensor target, Tensor? weight, Tensor lse, Tensor mass,"
        " Tensor grad_loss, float label_smoothing, float lse_square_scale, float softcap, bool target_grad)"
        " -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(reducekit, CUDA, m) {
  m.impl("cross_entropy_forward", &cross_entropy_forward_cuda);
  m.impl("cross_entropy_backward", &cross_entropy_backward_cuda);
  m.impl("cross_entropy_loss", &cross_entropy_loss_cuda);
  m.impl("cross_entropy_reduce", &cross_entropy_reduce_cuda);
  m.impl("cross_entropy_fused", &cross_entropy_fused_cuda);
  m.impl("cross_entropy_fused_", &cross_entropy_fused_inplace_cuda);
  m.impl("cross_entropy_step", &cross_entropy_step_cuda);
  m.impl("cross_entropy_step_", &cross_entropy_step_inplace_cuda);
  m.impl("cross_entropy_probs_forward", &cross_entropy_probs_forward_cuda);
  m.impl("cross_entropy_probs_loss", &cross_entropy_probs_loss_cuda);
  m.impl("cross_entropy_probs_backward", &cross_entropy_probs_backward_cuda);
}

TORCH_LIBRARY_IMPL(reducekit, CPU, m) {
  m.impl("cross_entropy_forward", &reject_cpu_forward);
  m.impl("cross_entropy_backward", &reject_cpu_backward);
  m.impl("cross_entropy_loss", &reject_cpu_loss);
  m.impl("cross_entropy_reduce", &reject_cpu_reduce);
  m.impl("cross_entropy_fused", &reject_cpu_fused);
  m.impl("cross_entropy_fused_", &reject_cpu_fused_inplace);
  m.impl("cross_entropy_step", &reject_cpu_step);
  m.impl("cross_entropy_step_", &reject_cpu_step_inplace);
  m.impl("cross_entropy_probs_forward", &reject_cpu_probs_forward);
  m.impl("cross_entropy_probs_loss", &reject_cpu_probs_loss);
  m.impl("cross_entropy_probs_backward", &reject_cpu_probs_backward);
}
