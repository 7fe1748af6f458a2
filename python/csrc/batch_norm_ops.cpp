// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit.batch_norm (training or inference forward; the running statistics are
// updated in place) and batch_norm_backward, with the autograd that joins them; and the stages of
// a batch spread over ranks (batch_norm_moments, _merge_moments, _apply, _backward_sums,
// _backward_apply), which reducekit.nn.SyncBatchNorm joins around torch.distributed's
// all_gather_into_tensor (python/reducekit/_sync_batch_norm.py). Thin: outputs
// from torch's caching allocator with x's memory format; x in a layout the core cannot read
// (neither contiguous nor channels-last) is made contiguous first; per-channel tensors in
// another dtype than the core's (float32, float64 for float64 x) go through a float copy.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "reducekit/reducekit.hpp"
#include "torch_util.hpp"

namespace {

using at::Tensor;
using reducekit_torch::OptionalTensor;
using reducekit_torch::check_cuda;
using reducekit_torch::device_empty;
using reducekit_torch::find_op;
using reducekit_torch::given;
using reducekit_torch::throw_if_failed;
using reducekit_torch::to_view;

at::ScalarType channel_type(const Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Channels-last in the core's sense: C innermost, then the spatial dims in order, then N.
bool channels_last_dense(const Tensor& x) {
  if (x.dim() < 2) return false;
  int64_t expected = 1;
  const auto check = [&](int64_t d) {
    if (x.size(d) == 1) return true;
    const bool ok = x.stride(d) == expected;
    expected *= x.size(d);
    return ok;
  };
  if (!check(1)) return false;
  for (int64_t d = x.dim() - 1; d >= 2; --d)
    if (!check(d)) return false;
  return check(0);
}

// x as the core reads it: contiguous or channels-last as it is, else a copy in the memory
// format torch suggests for it. Chosen before the call, not by with_layout_fallback's retry:
// y and dx are made in x's layout and dy is matched to it, so the layout must be known first.
Tensor readable(const Tensor& x) {
  return x.is_contiguous() || channels_last_dense(x) ? x : x.contiguous(x.suggest_memory_format());
}

// A per-channel tensor in the core's dtype, contiguous (a copy where it is not already).
OptionalTensor channel_input(const OptionalTensor& t, const Tensor& x, const char* name) {
  if (!given(t)) return std::nullopt;
  check_cuda(*t, name);
  return t->to(channel_type(x)).contiguous();
}

struct ChannelViews {
  std::optional<reducekit::TensorView> weight, bias;
  ChannelViews(const OptionalTensor& w, const OptionalTensor& b) {
    if (given(w)) weight = to_view(*w, "weight");
    if (given(b)) bias = to_view(*b, "bias");
  }
};
// The running statistics' views; the callers check they come together (both or neither).
struct RunningViews {
  std::optional<reducekit::TensorView> mean, var;
  RunningViews(const OptionalTensor& m, const OptionalTensor& v) {
    if (m) mean = to_view(*m, "running_mean");
    if (v) var = to_view(*v, "running_var");
  }
};
const reducekit::TensorView* ptr(const std::optional<reducekit::TensorView>& v) { return v ? &*v : nullptr; }

reducekit::BatchNormOptions options_of(double momentum, double eps) {
  reducekit::BatchNormOptions o;
  o.momentum = momentum;
  o.eps = eps;
  return o;
}

// dy in x's layout (a copy where it differs).
Tensor in_layout_of(const Tensor& grad_out, const Tensor& x) {
  return grad_out.strides() == x.strides() && grad_out.sizes() == x.sizes()
             ? grad_out
             : at::empty_like(x, grad_out.options()).copy_(grad_out);
}

cudaStream_t stream_of(const Tensor& x) { return c10::cuda::getCurrentCUDAStream(x.get_device()).stream(); }

std::tuple<Tensor, Tensor, Tensor> batch_norm_cuda(const Tensor& input, const OptionalTensor& weight,
                                                   const OptionalTensor& bias, const OptionalTensor& running_mean,
                                                   const OptionalTensor& running_var, bool training, double momentum,
                                                   double eps) {
  check_cuda(input, "input");
  TORCH_CHECK(given(running_mean) == given(running_var),
              "running_var: running_mean and running_var come together (both or neither)");
  TORCH_CHECK(training || given(running_mean), "running_mean: inference (training=False) needs the running statistics");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor x = readable(input);
  const OptionalTensor w = channel_input(weight, x, "weight"), b = channel_input(bias, x, "bias");
  // The running statistics are updated in place: a float copy (when they are kept in another
  // dtype or layout) is written back afterwards.
  const OptionalTensor rm = channel_input(running_mean, x, "running_mean");
  const OptionalTensor rv = channel_input(running_var, x, "running_var");
  const ChannelViews params(w, b);
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 0;
  const auto stat_options = x.options().dtype(channel_type(x));
  Tensor y = at::empty_like(x), save_mean = device_empty({channels}, stat_options),
         save_invstd = device_empty({channels}, stat_options);
  const reducekit::TensorView xv = to_view(x, "input"), yv = to_view(y, "y");
  const reducekit::TensorView mv = to_view(save_mean, "save_mean"), iv = to_view(save_invstd, "save_invstd");
  if (training) {
    const RunningViews running(rm, rv);
    const reducekit::BatchNormOptions o = options_of(momentum, eps);
    throw_if_failed(reducekit_torch::with_call_workspace<reducekit::BatchNormRequirements>(
        x, stream, [&](reducekit::BatchNormRequirements* req) { return reducekit::batch_norm_requirements(xv, req); },
        [&](const reducekit::Workspace& ws) {
          return reducekit::batch_norm_training_forward(xv, ptr(params.weight), ptr(params.bias), ptr(running.mean),
                                                        ptr(running.var), o, yv, mv, iv, ws, stream);
        }));
    if (rm) reducekit_torch::copy_back(*rm, *running_mean);
    if (rv) reducekit_torch::copy_back(*rv, *running_var);
  } else {
    throw_if_failed(reducekit::batch_norm_inference_forward(xv, ptr(params.weight), ptr(params.bias),
                                                            to_view(*rm, "running_mean"), to_view(*rv, "running_var"),
                                                            eps, yv, &mv, &iv, stream));
  }
  return {y, save_mean, save_invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_cuda(const Tensor& grad_out, const Tensor& input,
                                                            const OptionalTensor& weight, const Tensor& save_mean,
                                                            const Tensor& save_invstd, bool training,
                                                            std::array<bool, 3> output_mask) {
  check_cuda(input, "input");
  check_cuda(grad_out, "dy");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor x = readable(input);
  const Tensor dy = in_layout_of(grad_out, x);
  const OptionalTensor w = channel_input(weight, x, "weight");
  const Tensor mean = save_mean.to(channel_type(x)).contiguous(), invstd = save_invstd.to(channel_type(x)).contiguous();
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 0;
  const auto param_options = x.options().dtype(channel_type(x));
  // An output the mask leaves out is an empty tensor (the schema's results are all Tensors).
  Tensor dx = output_mask[0] ? at::empty_like(x) : device_empty({0}, x.options());
  Tensor dweight = device_empty({output_mask[1] ? channels : 0}, param_options);
  Tensor dbias = device_empty({output_mask[2] ? channels : 0}, param_options);
  std::optional<reducekit::TensorView> dxv, dwv, dbv, wv;
  if (output_mask[0]) dxv = to_view(dx, "dx");
  if (output_mask[1]) dwv = to_view(dweight, "dweight");
  if (output_mask[2]) dbv = to_view(dbias, "dbias");
  if (w) wv = to_view(*w, "weight");
  const reducekit::TensorView xv = to_view(x, "input"), dyv = to_view(dy, "dy");
  throw_if_failed(reducekit_torch::with_call_workspace<reducekit::BatchNormRequirements>(
      x, stream, [&](reducekit::BatchNormRequirements* req) { return reducekit::batch_norm_requirements(xv, req); },
      [&](const reducekit::Workspace& ws) {
        return reducekit::batch_norm_backward(dyv, xv, ptr(wv), to_view(mean, "save_mean"),
                                              to_view(invstd, "save_invstd"), training, ptr(dxv), ptr(dwv), ptr(dbv),
                                              ws, stream);
      }));
  return {dx, dweight, dbias};
}

// ---- autograd: forward below autograd, backward through batch_norm_backward ----------------

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class BatchNormAutograd : public torch::autograd::Function<BatchNormAutograd> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptionalTensor& weight,
                               const OptionalTensor& bias, const OptionalTensor& running_mean,
                               const OptionalTensor& running_var, bool training, double momentum, double eps) {
    static const auto op =
        find_op<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const OptionalTensor&, const OptionalTensor&,
                                                   const OptionalTensor&, const OptionalTensor&, bool, double, double)>(
            "reducekit::batch_norm");
    Tensor y, save_mean, save_invstd;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(y, save_mean, save_invstd) = op.call(x, weight, bias, running_mean, running_var, training, momentum, eps);
    }
    // The running statistics changed in place: their version counters say so (inference
    // tensors keep none).
    if (training && given(running_mean) && !running_mean->is_inference()) {
      torch::autograd::impl::bump_version(*running_mean);
      torch::autograd::impl::bump_version(*running_var);
    }
    ctx->mark_non_differentiable({save_mean, save_invstd});
    ctx->save_for_backward({x, weight.value_or(Tensor()), save_mean, save_invstd});
    ctx->saved_data["training"] = training;
    // needs_input_grad counts the tensors given: x, then weight and bias where present.
    ctx->saved_data["weight_edge"] = given(weight) ? int64_t{1} : int64_t{-1};
    ctx->saved_data["bias_edge"] = given(bias) ? int64_t{1} + given(weight) : int64_t{-1};
    ctx->set_materialize_grads(false);
    return {y, save_mean, save_invstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = find_op<std::tuple<Tensor, Tensor, Tensor>(
        const Tensor&, const Tensor&, const OptionalTensor&, const Tensor&, const Tensor&, bool, std::array<bool, 3>)>(
        "reducekit::batch_norm_backward");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &save_mean = saved[2], &save_invstd = saved[3];
    const bool wants_x = ctx->needs_input_grad(0);
    const auto wants = [&](const char* edge) {
      const int64_t index = ctx->saved_data[edge].toInt();
      return index >= 0 && ctx->needs_input_grad(index);
    };
    const bool wants_weight = wants("weight_edge"), wants_bias = wants("bias_edge");
    variable_list out(8);
    if (!grads[0].defined() || !(wants_x || wants_weight || wants_bias)) return out;
    auto [dx, dweight, dbias] =
        op.call(grads[0], x, weight.defined() ? OptionalTensor(weight) : std::nullopt, save_mean, save_invstd,
                ctx->saved_data["training"].toBool(), {wants_x, wants_weight, wants_bias});
    if (wants_x) out[0] = dx;
    if (wants_weight) out[1] = dweight;
    if (wants_bias) out[2] = dbias;
    return out;
  }
};

std::tuple<Tensor, Tensor, Tensor> batch_norm_autograd(const Tensor& x, const OptionalTensor& weight,
                                                       const OptionalTensor& bias, const OptionalTensor& running_mean,
                                                       const OptionalTensor& running_var, bool training,
                                                       double momentum, double eps) {
  const variable_list out =
      BatchNormAutograd::apply(x, weight, bias, running_mean, running_var, training, momentum, eps);
  return {out[0], out[1], out[2]};
}

// Which path a training forward (backward: a backward) on x takes: see batch_norm_reads_once.
bool batch_norm_reads_once_cuda(const Tensor& input, bool backward) {
  check_cuda(input, "input");
  const Tensor x = readable(input);
  bool once = false;
  throw_if_failed(reducekit::batch_norm_reads_once(to_view(x, "input"), backward, &once));
  return once;
}

// ---- stages of a batch spread over ranks --------------------------------------------------------
// Packets: float64 [C, 3] a rank, gathered [R, C, 3] in rank order (<reducekit/batch_norm.hpp>).

Tensor new_packet(const Tensor& x) {
  return device_empty({x.dim() >= 2 ? x.size(1) : 0, reducekit::kBatchNormPacketWidth}, x.options().dtype(at::kDouble));
}

// A statistic or gathered packets as the core reads them: contiguous, in `dtype`.
Tensor dense(const Tensor& t, at::ScalarType dtype, const char* name) {
  check_cuda(t, name);
  return t.to(dtype).contiguous();
}

Tensor batch_norm_moments_cuda(const Tensor& input) {
  check_cuda(input, "input");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor x = readable(input);
  Tensor packet = new_packet(x);
  const reducekit::TensorView xv = to_view(x, "input"), pv = to_view(packet, "packet");
  throw_if_failed(reducekit_torch::with_call_workspace<reducekit::BatchNormRequirements>(
      x, stream, [&](reducekit::BatchNormRequirements* req) { return reducekit::batch_norm_requirements(xv, req); },
      [&](const reducekit::Workspace& ws) { return reducekit::batch_norm_moments(xv, pv, ws, stream); }));
  return packet;
}

// input: this rank's x, for the statistics' dtype and device only.
std::tuple<Tensor, Tensor> batch_norm_merge_moments_cuda(const Tensor& input, const Tensor& packets,
                                                         const OptionalTensor& running_mean,
                                                         const OptionalTensor& running_var, double momentum,
                                                         double eps) {
  check_cuda(input, "input");
  TORCH_CHECK(given(running_mean) == given(running_var),
              "running_var: running_mean and running_var come together (both or neither)");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor p = dense(packets, at::kDouble, "packets");
  const OptionalTensor rm = channel_input(running_mean, input, "running_mean");
  const OptionalTensor rv = channel_input(running_var, input, "running_var");
  const int64_t channels = p.dim() == 3 ? p.size(1) : 0;
  const auto stat_options = input.options().dtype(channel_type(input));
  Tensor save_mean = device_empty({channels}, stat_options), save_invstd = device_empty({channels}, stat_options);
  const RunningViews running(rm, rv);
  throw_if_failed(reducekit::batch_norm_merge_moments(
      to_view(p, "packets"), to_view(input, "input").dtype, ptr(running.mean), ptr(running.var),
      options_of(momentum, eps), to_view(save_mean, "save_mean"), to_view(save_invstd, "save_invstd"), stream));
  if (rm) reducekit_torch::copy_back(*rm, *running_mean);
  if (rv) reducekit_torch::copy_back(*rv, *running_var);
  return {save_mean, save_invstd};
}

Tensor batch_norm_apply_cuda(const Tensor& input, const OptionalTensor& weight, const OptionalTensor& bias,
                             const Tensor& mean, const Tensor& invstd) {
  check_cuda(input, "input");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor x = readable(input);
  const OptionalTensor w = channel_input(weight, x, "weight"), b = channel_input(bias, x, "bias");
  const Tensor m = dense(mean, channel_type(x), "mean"), is = dense(invstd, channel_type(x), "invstd");
  const ChannelViews params(w, b);
  Tensor y = at::empty_like(x);
  const reducekit::TensorView xv = to_view(x, "input"), yv = to_view(y, "y");
  const reducekit::TensorView mv = to_view(m, "mean"), iv = to_view(is, "invstd");
  throw_if_failed(reducekit_torch::with_call_workspace<reducekit::BatchNormRequirements>(
      x, stream, [&](reducekit::BatchNormRequirements* req) { return reducekit::batch_norm_requirements(xv, req); },
      [&](const reducekit::Workspace& ws) {
        return reducekit::batch_norm_apply(xv, ptr(params.weight), ptr(params.bias), mv, iv, yv, ws, stream);
      }));
  return y;
}

Tensor batch_norm_backward_sums_cuda(const Tensor& grad_out, const Tensor& input, const Tensor& save_mean,
                                     const Tensor& save_invstd) {
  check_cuda(input, "input");
  check_cuda(grad_out, "dy");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor x = readable(input);
  const Tensor dy = in_layout_of(grad_out, x);
  const Tensor m = dense(save_mean, channel_type(x), "save_mean"), is = dense(save_invstd, channel_type(x), "save_invstd");
  Tensor packet = new_packet(x);
  const reducekit::TensorView xv = to_view(x, "input"), dyv = to_view(dy, "dy"), pv = to_view(packet, "packet");
  throw_if_failed(reducekit_torch::with_call_workspace<reducekit::BatchNormRequirements>(
      x, stream, [&](reducekit::BatchNormRequirements* req) { return reducekit::batch_norm_requirements(xv, req); },
      [&](const reducekit::Workspace& ws) {
        return reducekit::batch_norm_backward_sums(dyv, xv, to_view(m, "save_mean"), to_view(is, "save_invstd"), pv,
                                                   nullptr, nullptr, ws, stream);
      }));
  return packet;
}

Tensor batch_norm_backward_apply_cuda(const Tensor& grad_out, const Tensor& input, const OptionalTensor& weight,
                                      const Tensor& save_mean, const Tensor& save_invstd, const Tensor& packets) {
  check_cuda(input, "input");
  check_cuda(grad_out, "dy");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = stream_of(input);
  const Tensor x = readable(input);
  const Tensor dy = in_layout_of(grad_out, x);
  const OptionalTensor w = channel_input(weight, x, "weight");
  const Tensor m = dense(save_mean, channel_type(x), "save_mean"), is = dense(save_invstd, channel_type(x), "save_invstd");
  const Tensor p = dense(packets, at::kDouble, "packets");
  std::optional<reducekit::TensorView> wv;
  if (w) wv = to_view(*w, "weight");
  Tensor dx = at::empty_like(x);
  const reducekit::TensorView xv = to_view(x, "input"), dyv = to_view(dy, "dy"), dxv = to_view(dx, "dx");
  throw_if_failed(reducekit_torch::with_call_workspace<reducekit::BatchNormRequirements>(
      x, stream, [&](reducekit::BatchNormRequirements* req) { return reducekit::batch_norm_requirements(xv, req); },
      [&](const reducekit::Workspace& ws) {
        return reducekit::batch_norm_backward_apply(dyv, xv, ptr(wv), to_view(m, "save_mean"),
                                                    to_view(is, "save_invstd"), to_view(p, "packets"), dxv, ws, stream);
      }));
  return dx;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(reducekit, m) {
  m.def("batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, Tensor(b!)? running_var,"
        " bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)");
  m.def("batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor save_mean, Tensor save_invstd,"
        " bool training, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("batch_norm_reads_once(Tensor input, bool backward) -> bool");
  m.def("batch_norm_moments(Tensor input) -> Tensor");
  m.def("batch_norm_merge_moments(Tensor input, Tensor packets, Tensor(a!)? running_mean, Tensor(b!)? running_var,"
        " float momentum, float eps) -> (Tensor, Tensor)");
  m.def("batch_norm_apply(Tensor input, Tensor? weight, Tensor? bias, Tensor mean, Tensor invstd) -> Tensor");
  m.def("batch_norm_backward_sums(Tensor grad_out, Tensor input, Tensor save_mean, Tensor save_invstd) -> Tensor");
  m.def("batch_norm_backward_apply(Tensor grad_out, Tensor input, Tensor? weight, Tensor save_mean,"
        " Tensor save_invstd, Tensor packets) -> Tensor");
}

TORCH_LIBRARY_IMPL(reducekit, CUDA, m) {
  m.impl("batch_norm", &batch_norm_cuda);
  m.impl("batch_norm_backward", &batch_norm_backward_cuda);
  m.impl("batch_norm_reads_once", &batch_norm_reads_once_cuda);
  m.impl("batch_norm_moments", &batch_norm_moments_cuda);
  m.impl("batch_norm_merge_moments", &batch_norm_merge_moments_cuda);
  m.impl("batch_norm_apply", &batch_norm_apply_cuda);
  m.impl("batch_norm_backward_sums", &batch_norm_backward_sums_cuda);
  m.impl("batch_norm_backward_apply", &batch_norm_backward_apply_cuda);
}

TORCH_LIBRARY_IMPL(reducekit, Autograd, m) { m.impl("batch_norm", &batch_norm_autograd); }
