// SPDX-License-Identifier: Apache-2.0
// Autograd of cross_entropy_loss and cross_entropy_probs_loss (torch's 'mean' / 'sum' of the
// class-index and class-probability losses) in C++, as for the norms (norm_autograd.cpp): a step
// that composed the reduction from torch's elementwise ops under a Python autograd node spent
// about 700 us of host time against torch's 160 (bench/results/LOG.md).
//
//   out, lse, denominator = cross_entropy_loss(logits, target, ...)
//   backward: dlogits = cross_entropy_backward(..., grad_loss = d out / denominator, one value
//             for every row); lse and the denominator are not differentiable.
//   out, lse, mass, denominator = cross_entropy_probs_loss(logits, target, ...)
//   backward: dlogits, dtarget = cross_entropy_probs_backward(..., d out / denominator, ...).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "torch_util.hpp"

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using reducekit_torch::OptionalTensor;
using reducekit_torch::find_op;
using reducekit_torch::given;

// Whether backward is asked for the class weights' gradient. needs_input_grad counts the tensors
// given (logits, target, then the weights where given), so the weights' edge is 2 only then.
bool weight_wanted(AutogradContext* ctx, const Tensor& saved_weight) {
  return saved_weight.defined() && ctx->needs_input_grad(2);
}

// What backward says to class weights that require a gradient, as torch's F.cross_entropy does.
constexpr const char* kNoWeightGradient =
    "weight: the gradient of cross_entropy with class-index targets with respect to the class weights is not "
    "implemented (torch's is not either)";

// Inputs as apply() takes them: (logits, target, weight, ignore_index, reduction, label_smoothing,
// lse_square_scale, softcap); backward returns one grad per argument, the logits' alone (class
// weights that require one are an error, as in torch).
class CrossEntropyLossAutograd : public torch::autograd::Function<CrossEntropyLossAutograd> {
 public:
  static variable_list run(const Tensor& logits, const Tensor& target, const OptionalTensor& weight,
                           int64_t ignore_index, c10::string_view reduction, double smoothing, double z_scale,
                           double softcap) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op =
        find_op<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const OptionalTensor&, int64_t,
                                                   c10::string_view, double, double, double)>(
            "reducekit::cross_entropy_loss");
    auto [out, lse, denominator] =
        op.call(logits, target, weight, ignore_index, reduction, smoothing, z_scale, softcap);
    return {out, lse, denominator};
  }

  static variable_list forward(AutogradContext* ctx, const Tensor& logits, const Tensor& target,
                               const OptionalTensor& weight, int64_t ignore_index, c10::string_view reduction,
                               double smoothing, double z_scale, double softcap) {
    variable_list out = run(logits, target, weight, ignore_index, reduction, smoothing, z_scale, softcap);
    ctx->mark_non_differentiable({out[1], out[2]});
    ctx->save_for_backward({logits, target, weight.value_or(Tensor()), out[1], out[2]});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["options"] = std::vector<double>{smoothing, z_scale, softcap};
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = find_op<Tensor(const Tensor&, const Tensor&, const OptionalTensor&, const Tensor&,
                                          const Tensor&, int64_t, double, double, double)>(
        "reducekit::cross_entropy_backward");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &logits = saved[0], &target = saved[1], &weight = saved[2], &lse = saved[3],
                 &denominator = saved[4];
    TORCH_CHECK(!weight_wanted(ctx, weight), kNoWeightGradient);
    variable_list none(8);
    if (!grads[0].defined()) return none;  // the loss was not used
    // The row losses' upstream gradient, one value for every row, in the denominator's dtype
    // (float32, float64 for float64 logits): the 0-dim division promotes the logits' dtype to it.
    const Tensor grad_rows = at::div(grads[0], denominator).reshape({1});
    const std::vector<double> o = ctx->saved_data["options"].toDoubleVector();
    none[0] = op.call(logits, target, weight.defined() ? OptionalTensor(weight) : std::nullopt, lse, grad_rows,
                      ctx->saved_data["ignore_index"].toInt(), o[0], o[1], o[2]);
    return none;
  }
};

// Inputs: (logits, target, weight, reduction, label_smoothing, lse_square_scale, softcap, dtype); the
// grads of the logits and, where it requires one, of the target (class probabilities). Weights
// that require a gradient never come here: Python composes that case from ops with autograd.
class ProbabilityLossAutograd : public torch::autograd::Function<ProbabilityLossAutograd> {
 public:
  static variable_list run(const Tensor& logits, const Tensor& target, const OptionalTensor& weight,
                           c10::string_view reduction, double smoothing, double z_scale, double softcap,
                           std::optional<at::ScalarType> dtype) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op =
        find_op<std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const OptionalTensor&,
                                                           c10::string_view, double, double, double,
                                                           std::optional<at::ScalarType>)>(
            "reducekit::cross_entropy_probs_loss");
    auto [out, lse, mass, denominator] =
        op.call(logits, target, weight, reduction, smoothing, z_scale, softcap, dtype);
    return {out, lse, mass, denominator};
  }

  static variable_list forward(AutogradContext* ctx, const Tensor& logits, const Tensor& target,
                               const OptionalTensor& weight, c10::string_view reduction, double smoothing,
                               double z_scale, double softcap, std::optional<at::ScalarType> dtype) {
    variable_list out = run(logits, target, weight, reduction, smoothing, z_scale, softcap, dtype);
    ctx->mark_non_differentiable({out[1], out[2], out[3]});
    ctx->save_for_backward({logits, target, weight.value_or(Tensor()), out[1], out[2], out[3]});
    ctx->saved_data["options"] = std::vector<double>{smoothing, z_scale, softcap};
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = find_op<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const OptionalTensor&,
                                                              const Tensor&, const Tensor&, const Tensor&, double,
                                                              double, double, bool)>(
        "reducekit::cross_entropy_probs_backward");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &logits = saved[0], &target = saved[1], &weight = saved[2], &lse = saved[3], &mass = saved[4],
                 &denominator = saved[5];
    TORCH_CHECK(!weight_wanted(ctx, weight), "weight: class weights that require a gradient take the composed path");
    variable_list none(8);
    if (!grads[0].defined()) return none;
    const Tensor grad_rows = at::div(grads[0], denominator).reshape({1});  // as CrossEntropyLossAutograd's
    const std::vector<double> o = ctx->saved_data["options"].toDoubleVector();
    const bool target_grad = ctx->needs_input_grad(1);
    auto [dlogits, dtarget] = op.call(logits, target, weight.defined() ? OptionalTensor(weight) : std::nullopt, lse,
                                      mass, grad_rows, o[0], o[1], o[2], target_grad);
    none[0] = dlogits;
    if (target_grad) none[1] = dtarget;
    return none;
  }
};

// A call with nothing to record (grad mode off, or no input that needs a gradient) runs the op
// below autograd at once, as the norms do.
std::tuple<Tensor, Tensor, Tensor> cross_entropy_loss_autograd(const Tensor& logits, const Tensor& target,
                                                               const OptionalTensor& weight, int64_t ignore_index,
                                                               c10::string_view reduction, double smoothing,
                                                               double z_scale, double softcap) {
  const bool records = at::GradMode::is_enabled() &&
                       (logits.requires_grad() || (given(weight) && weight->requires_grad()));
  const variable_list out =
      records ? CrossEntropyLossAutograd::apply(logits, target, weight, ignore_index, reduction, smoothing, z_scale,
                                                softcap)
              : CrossEntropyLossAutograd::run(logits, target, weight, ignore_index, reduction, smoothing, z_scale,
                                              softcap);
  return {out[0], out[1], out[2]};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> cross_entropy_probs_loss_autograd(
    const Tensor& logits, const Tensor& target, const OptionalTensor& weight, c10::string_view reduction,
    double smoothing, double z_scale, double softcap, std::optional<at::ScalarType> dtype) {
  const bool records = at::GradMode::is_enabled() && (logits.requires_grad() || target.requires_grad() ||
                                                      (given(weight) && weight->requires_grad()));
  const variable_list out =
      records ? ProbabilityLossAutograd::apply(logits, target, weight, reduction, smoothing, z_scale, softcap, dtype)
              : ProbabilityLossAutograd::run(logits, target, weight, reduction, smoothing, z_scale, softcap, dtype);
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace

TORCH_LIBRARY_IMPL(reducekit, Autograd, m) {
  m.impl("cross_entropy_loss", &cross_entropy_loss_autograd);
  m.impl("cross_entropy_probs_loss", &cross_entropy_probs_loss_autograd);
}
