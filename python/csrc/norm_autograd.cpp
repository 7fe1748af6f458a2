// SPDX-License-Identifier: Apache-2.0
// Autograd of the norms (layer_norm, rms_norm and their fused residual forms), in C++: the
// Python kernel that torch.library.register_autograd installs cost about 25 us of host time a
// call with grad (measured on softmax). Forward runs the op below autograd and keeps what backward
// reads; backward runs the matching backward op. The statistics outputs are not differentiable.
//
//   y, [s,] stats = norm(x [+ residual])      backward: dx from dy; d(residual) = dx;
//                                               dx += ds where the sum s is used too.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "torch_util.hpp"

namespace {

using at::IntArrayRef;
using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using reducekit_torch::OptionalTensor;
using reducekit_torch::find_op;
using reducekit_torch::given;

// dweight / dbias come back in the parameters' dtype (float32 parameters with 16-bit x).
at::ScalarType param_dtype(const Tensor& x, const OptionalTensor& weight, const OptionalTensor& bias) {
  if (given(weight)) return weight->scalar_type();
  if (given(bias)) return bias->scalar_type();
  return x.scalar_type();
}

// What forward leaves for backward, besides the saved tensors. needs_input_grad counts only the
// tensors given (x, residual when fused, weight and bias when present), so the weight's and the
// bias's places among them are kept (-1: not given).
void save_meta(AutogradContext* ctx, IntArrayRef shape, const Tensor& x, bool residual, const OptionalTensor& weight,
               const OptionalTensor& bias) {
  const int64_t weight_edge = given(weight) ? 1 + residual : -1;
  ctx->saved_data["shape"] = shape.vec();
  ctx->saved_data["weight_edge"] = weight_edge;
  ctx->saved_data["bias_edge"] = given(bias) ? 1 + residual + given(weight) : int64_t{-1};
  ctx->saved_data["param_dtype"] = param_dtype(x, weight, bias);
  ctx->set_materialize_grads(false);  // unused outputs' grads stay undefined
}

OptionalTensor optional_of(const Tensor& t) { return t.defined() ? OptionalTensor(t) : std::nullopt; }

// Whether backward must produce the grad of the tensor kept at `edge` by save_meta.
bool wanted(AutogradContext* ctx, const char* edge) {
  const int64_t index = ctx->saved_data[edge].toInt();
  return index >= 0 && ctx->needs_input_grad(index);
}

// Inputs as apply() takes them: (x, residual, normalized_shape, weight, bias, eps); residual is
// absent for the plain ops, bias optional for every op (rms_norm's too: the op takes it last).
// Backward returns one grad per argument.

variable_list input_grads(bool residual, Tensor dx, const variable_list& grads, const Tensor& dweight,
                          const Tensor& dbias) {
  if (residual && grads[1].defined()) dx = dx + grads[1];  // the sum s was used as well
  return {dx, residual ? dx : Tensor(), Tensor(), dweight, dbias, Tensor()};
}

template <bool kResidual> class LayerNormAutograd : public torch::autograd::Function<LayerNormAutograd<kResidual>> {
 public:
  // The op below autograd: (y, [s,] mean, rstd).
  static variable_list run(const Tensor& x, const OptionalTensor& residual, IntArrayRef shape,
                           const OptionalTensor& weight, const OptionalTensor& bias, double eps) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    if constexpr (kResidual) {
      static const auto op =
          find_op<std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, IntArrayRef,
                                                             const OptionalTensor&, const OptionalTensor&, double)>(
              "reducekit::add_layer_norm");
      auto [y, s, mean, rstd] = op.call(x, *residual, shape, weight, bias, eps);
      return {y, s, mean, rstd};
    } else {
      static const auto op = find_op<std::tuple<Tensor, Tensor, Tensor>(
          const Tensor&, IntArrayRef, const OptionalTensor&, const OptionalTensor&, double)>("reducekit::layer_norm");
      auto [y, mean, rstd] = op.call(x, shape, weight, bias, eps);
      return {y, mean, rstd};
    }
  }

  static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptionalTensor& residual, IntArrayRef shape,
                               const OptionalTensor& weight, const OptionalTensor& bias, double eps) {
    variable_list out = run(x, residual, shape, weight, bias, eps);
    const Tensor& s = kResidual ? out[1] : x;
    const Tensor &mean = out[kResidual + 1], &rstd = out[kResidual + 2];
    ctx->mark_non_differentiable({mean, rstd});
    ctx->save_for_backward({s, mean, rstd, weight.value_or(Tensor())});
    save_meta(ctx, shape, x, kResidual, weight, bias);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op =
        find_op<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, IntArrayRef, const Tensor&,
                                                   const Tensor&, const OptionalTensor&, bool, at::ScalarType)>(
            "reducekit::layer_norm_backward");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &s = saved[0], &mean = saved[1], &rstd = saved[2], &weight = saved[3];
    const bool wants_weight = wanted(ctx, "weight_edge"), wants_bias = wanted(ctx, "bias_edge");
    const bool wants = wants_weight || wants_bias;
    const Tensor dy = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(s);
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    auto [dx, dweight, dbias] = op.call(dy, s, shape, mean, rstd, optional_of(weight), wants,
                                        ctx->saved_data["param_dtype"].toScalarType());
    return input_grads(kResidual, dx, grads, wants_weight ? dweight : Tensor(), wants_bias ? dbias : Tensor());
  }
};

template <bool kResidual> class RmsNormAutograd : public torch::autograd::Function<RmsNormAutograd<kResidual>> {
 public:
  // The op below autograd: (y, [s,] rstd).
  static variable_list run(const Tensor& x, const OptionalTensor& residual, IntArrayRef shape,
                           const OptionalTensor& weight, const OptionalTensor& bias, double eps) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    if constexpr (kResidual) {
      static const auto op =
          find_op<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, IntArrayRef, const OptionalTensor&,
                                                     double, const OptionalTensor&)>("reducekit::add_rms_norm");
      auto [y, s, rstd] = op.call(x, *residual, shape, weight, eps, bias);
      return {y, s, rstd};
    } else {
      static const auto op = find_op<std::tuple<Tensor, Tensor>(const Tensor&, IntArrayRef, const OptionalTensor&,
                                                                 double, const OptionalTensor&)>("reducekit::rms_norm");
      auto [y, rstd] = op.call(x, shape, weight, eps, bias);
      return {y, rstd};
    }
  }

  static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptionalTensor& residual, IntArrayRef shape,
                               const OptionalTensor& weight, const OptionalTensor& bias, double eps) {
    variable_list out = run(x, residual, shape, weight, bias, eps);
    const Tensor& s = kResidual ? out[1] : x;
    const Tensor& rstd = out[kResidual + 1];
    ctx->mark_non_differentiable({rstd});
    ctx->save_for_backward({s, rstd, weight.value_or(Tensor())});
    save_meta(ctx, shape, x, kResidual, weight, bias);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = find_op<std::tuple<Tensor, Tensor, Tensor>(
        const Tensor&, const Tensor&, IntArrayRef, const Tensor&, const OptionalTensor&, bool, at::ScalarType, bool)>(
        "reducekit::rms_norm_backward");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &s = saved[0], &rstd = saved[1], &weight = saved[2];
    // The bias is not needed to differentiate: dbias is the column sums of dy.
    const bool wants_weight = wanted(ctx, "weight_edge"), wants_bias = wanted(ctx, "bias_edge");
    const Tensor dy = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(s);
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    auto [dx, dweight, dbias] = op.call(dy, s, shape, rstd, optional_of(weight), wants_weight,
                                        ctx->saved_data["param_dtype"].toScalarType(), wants_bias);
    return input_grads(kResidual, dx, grads, wants_weight ? dweight : Tensor(), wants_bias ? dbias : Tensor());
  }
};

// Whether a call has anything to record: grad mode on and an input that needs a gradient. A call
// without runs the op below autograd at once (no node, no saved tensors), as the reductions do.
bool records(const Tensor& x, const OptionalTensor& residual, const OptionalTensor& weight,
             const OptionalTensor& bias) {
  const auto needs = [](const OptionalTensor& t) { return given(t) && t->requires_grad(); };
  return at::GradMode::is_enabled() && (x.requires_grad() || needs(residual) || needs(weight) || needs(bias));
}

template <class Function>
variable_list norm_call(const Tensor& x, const OptionalTensor& residual, IntArrayRef shape,
                        const OptionalTensor& weight, const OptionalTensor& bias, double eps) {
  if (!records(x, residual, weight, bias)) return Function::run(x, residual, shape, weight, bias, eps);
  return Function::apply(x, residual, shape, weight, bias, eps);
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_autograd(const Tensor& x, IntArrayRef shape, const OptionalTensor& weight,
                                                       const OptionalTensor& bias, double eps) {
  const variable_list out = norm_call<LayerNormAutograd<false>>(x, OptionalTensor(), shape, weight, bias, eps);
  return {out[0], out[1], out[2]};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> add_layer_norm_autograd(const Tensor& x, const Tensor& residual,
                                                                   IntArrayRef shape, const OptionalTensor& weight,
                                                                   const OptionalTensor& bias, double eps) {
  const variable_list out = norm_call<LayerNormAutograd<true>>(x, residual, shape, weight, bias, eps);
  return {out[0], out[1], out[2], out[3]};
}

std::tuple<Tensor, Tensor> rms_norm_autograd(const Tensor& x, IntArrayRef shape, const OptionalTensor& weight,
                                             double eps, const OptionalTensor& bias) {
  const variable_list out = norm_call<RmsNormAutograd<false>>(x, OptionalTensor(), shape, weight, bias, eps);
  return {out[0], out[1]};
}

std::tuple<Tensor, Tensor, Tensor> add_rms_norm_autograd(const Tensor& x, const Tensor& residual, IntArrayRef shape,
                                                         const OptionalTensor& weight, double eps,
                                                         const OptionalTensor& bias) {
  const variable_list out = norm_call<RmsNormAutograd<true>>(x, residual, shape, weight, bias, eps);
  return {out[0], out[1], out[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(reducekit, Autograd, m) {
  m.impl("layer_norm", &layer_norm_autograd);
  m.impl("add_layer_norm", &add_layer_norm_autograd);
  m.impl("rms_norm", &rms_norm_autograd);
  m.impl("add_rms_norm", &add_rms_norm_autograd);
}
