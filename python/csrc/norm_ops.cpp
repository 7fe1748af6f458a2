// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit norms: layer_norm, rms_norm, their fused residual forms and backward ops.
// Thin: outputs and the workspace come from torch's caching allocator, layouts the core cannot
// read in place (kUnsupported) are retried on contiguous copies (with_layout_fallback,
// torch_util.hpp), and every check lives in the core.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "reducekit/reducekit.hpp"
#include "torch_util.hpp"

namespace {

using reducekit_torch::check_cuda;
using reducekit_torch::device_empty;
using reducekit_torch::given;
using reducekit_torch::Operand;
using reducekit_torch::to_view;
using reducekit_torch::with_layout_fallback;

reducekit::NormShape norm_shape(at::IntArrayRef s) {
  reducekit::NormShape n;
  n.rank = static_cast<int>(s.size());
  for (int d = 0; d < n.rank && d < reducekit::kMaxRank; ++d) n.sizes[d] = s[d];
  return n;
}

// One value per row: x's leading dims (those before the normalized ones).
std::vector<int64_t> stat_shape(const at::Tensor& x, at::IntArrayRef normalized_shape) {
  const int64_t lead = std::max<int64_t>(0, x.dim() - static_cast<int64_t>(normalized_shape.size()));
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().begin() + lead);
}

at::ScalarType stat_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

cudaStream_t stream_of(const at::Tensor& x) { return c10::cuda::getCurrentCUDAStream(x.get_device()).stream(); }

// Optional per-column parameters, contiguous (the core requires it; a no-op when already so).
struct OptionalParam {
  at::Tensor tensor;
  reducekit::TensorView view;
  OptionalParam(const std::optional<at::Tensor>& t, const char* name) {
    if (given(t)) {
      check_cuda(*t, name);
      tensor = t->contiguous();
      view = to_view(tensor, name);
    }
  }
  const reducekit::TensorView* get() const { return tensor.defined() ? &view : nullptr; }
};

// Forward calls whose rows split over a cooperative grid need a workspace, as softmax's do
// (torch_util.hpp). `requirements`: layer_norm_requirements or rms_norm_requirements.
using Requirements = reducekit::Status (*)(const reducekit::TensorView&, const reducekit::NormShape&, bool,
                                           reducekit::NormRequirements*);
template <class Call>
reducekit::Status with_workspace(const at::Tensor& x, const reducekit::TensorView& xv, at::IntArrayRef normalized_shape,
                                 bool residual, Requirements requirements, Call call) {
  return reducekit_torch::with_call_workspace<reducekit::NormRequirements>(
      x, stream_of(x), [&](auto* req) { return requirements(xv, norm_shape(normalized_shape), residual, req); }, call);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_cuda(const at::Tensor& x, at::IntArrayRef normalized_shape,
                                                               const std::optional<at::Tensor>& weight,
                                                               const std::optional<at::Tensor>& bias, double eps) {
  check_cuda(x, "input");
  to_view(x, "input");  // rank and dtype checked on input first, not on the outputs made like it
  const c10::cuda::CUDAGuard guard(x.device());
  const OptionalParam w(weight, "weight"), b(bias, "bias");
  at::Tensor y = device_empty(x.sizes(), x.options());
  at::Tensor mean = device_empty(stat_shape(x, normalized_shape), x.options().dtype(stat_type(x)));
  at::Tensor rstd = device_empty(mean.sizes(), mean.options());
  const auto yv = to_view(y, "y"), mv = to_view(mean, "mean"), rv = to_view(rstd, "rstd");
  with_layout_fallback({Operand::in(x)}, [&](const auto& t, bool) {
    const auto xv = to_view(t[0], "input");
    return with_workspace(x, xv, normalized_shape, false, reducekit::layer_norm_requirements, [&](const auto& ws) {
      return reducekit::layer_norm(xv, norm_shape(normalized_shape), w.get(), b.get(), eps, yv, &mv, &rv, ws,
                                   stream_of(x));
    });
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_cuda(const at::Tensor& x, at::IntArrayRef normalized_shape,
                                                 const std::optional<at::Tensor>& weight, double eps,
                                                 const std::optional<at::Tensor>& bias) {
  check_cuda(x, "input");
  to_view(x, "input");  // rank and dtype checked on input first, not on the outputs made like it
  const c10::cuda::CUDAGuard guard(x.device());
  const OptionalParam w(weight, "weight"), b(bias, "bias");
  at::Tensor y = device_empty(x.sizes(), x.options());
  at::Tensor rstd = device_empty(stat_shape(x, normalized_shape), x.options().dtype(stat_type(x)));
  const auto yv = to_view(y, "y"), rv = to_view(rstd, "rstd");
  with_layout_fallback({Operand::in(x)}, [&](const auto& t, bool) {
    const auto xv = to_view(t[0], "input");
    return with_workspace(x, xv, normalized_shape, false, reducekit::rms_norm_requirements, [&](const auto& ws) {
      return reducekit::rms_norm(xv, norm_shape(normalized_shape), w.get(), b.get(), eps, yv, &rv, ws, stream_of(x));
    });
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm_cuda(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  check_cuda(x, "input");
  check_cuda(residual, "residual");
  to_view(x, "input");  // rank and dtype checked on input first, not on the outputs made like it
  const c10::cuda::CUDAGuard guard(x.device());
  const OptionalParam w(weight, "weight"), b(bias, "bias");
  at::Tensor y = device_empty(x.sizes(), x.options());
  at::Tensor sum = device_empty(x.sizes(), x.options());
  at::Tensor mean = device_empty(stat_shape(x, normalized_shape), x.options().dtype(stat_type(x)));
  at::Tensor rstd = device_empty(mean.sizes(), mean.options());
  const auto yv = to_view(y, "y"), sv = to_view(sum, "sum"), mv = to_view(mean, "mean"), rv = to_view(rstd, "rstd");
  with_layout_fallback({Operand::in(x), Operand::in(residual)}, [&](const auto& t, bool) {
    const auto xv = to_view(t[0], "input");
    return with_workspace(x, xv, normalized_shape, true, reducekit::layer_norm_requirements, [&](const auto& ws) {
      return reducekit::add_layer_norm(xv, to_view(t[1], "residual"), norm_shape(normalized_shape), w.get(), b.get(),
                                       eps, yv, sv, &mv, &rv, ws, stream_of(x));
    });
  });
  return {y, sum, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_cuda(const at::Tensor& x, const at::Tensor& residual,
                                                                 at::IntArrayRef normalized_shape,
                                                                 const std::optional<at::Tensor>& weight, double eps,
                                                                 const std::optional<at::Tensor>& bias) {
  check_cuda(x, "input");
  check_cuda(residual, "residual");
  to_view(x, "input");  // rank and dtype checked on input first, not on the outputs made like it
  const c10::cuda::CUDAGuard guard(x.device());
  const OptionalParam w(weight, "weight"), b(bias, "bias");
  at::Tensor y = device_empty(x.sizes(), x.options());
  at::Tensor sum = device_empty(x.sizes(), x.options());
  at::Tensor rstd = device_empty(stat_shape(x, normalized_shape), x.options().dtype(stat_type(x)));
  const auto yv = to_view(y, "y"), sv = to_view(sum, "sum"), rv = to_view(rstd, "rstd");
  with_layout_fallback({Operand::in(x), Operand::in(residual)}, [&](const auto& t, bool) {
    const auto xv = to_view(t[0], "input");
    return with_workspace(x, xv, normalized_shape, true, reducekit::rms_norm_requirements, [&](const auto& ws) {
      return reducekit::add_rms_norm(xv, to_view(t[1], "residual"), norm_shape(normalized_shape), w.get(), b.get(),
                                     eps, yv, sv, &rv, ws, stream_of(x));
    });
  });
  return {y, sum, rstd};
}

// dweight (normalized_shape, param_dtype) when param_grads, else an empty [0] tensor; dbias the
// same when param_grads for layer_norm, when bias_grad for rms_norm (whose bias is optional).
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_backward(bool layer, const at::Tensor& dy, const at::Tensor& x,
                                                             at::IntArrayRef normalized_shape,
                                                             const std::optional<at::Tensor>& mean,
                                                             const at::Tensor& rstd,
                                                             const std::optional<at::Tensor>& weight, bool param_grads,
                                                             at::ScalarType param_dtype, bool bias_grad) {
  check_cuda(dy, "dy");
  check_cuda(x, "x");
  check_cuda(rstd, "rstd");
  const c10::cuda::CUDAGuard guard(x.device());
  const OptionalParam w(weight, "weight");
  const at::Tensor mean_c = layer ? mean.value().contiguous() : at::Tensor();
  const at::Tensor rstd_c = rstd.contiguous();
  at::Tensor dx = device_empty(x.sizes(), x.options());
  const auto param_options = x.options().dtype(param_dtype);
  at::Tensor dweight = param_grads ? device_empty(normalized_shape, param_options) : device_empty({0}, param_options);
  const bool want_dbias = layer ? param_grads : bias_grad;
  at::Tensor dbias = want_dbias ? device_empty(normalized_shape, param_options) : device_empty({0}, param_options);
  const auto dxv = to_view(dx, "dx"), dwv = to_view(dweight, "dweight"), dbv = to_view(dbias, "dbias");
  const auto rv = to_view(rstd_c, "rstd");
  const reducekit::NormShape shape = norm_shape(normalized_shape);
  auto run = [&](const auto& t, bool) {
    const at::Tensor &xi = t[0], &dyi = t[1];
    const auto xv = to_view(xi, "x");
    reducekit::Workspace ws;
    at::Tensor ws_tensor;
    if (param_grads || want_dbias) {
      reducekit::NormRequirements req;
      const reducekit::Status s = reducekit::norm_backward_requirements(xv, shape, &req);
      if (!s.is_ok()) return s;
      ws_tensor = device_empty({static_cast<int64_t>(req.workspace_bytes)}, x.options().dtype(at::kByte));
      ws = {ws_tensor.data_ptr(), req.workspace_bytes};
    }
    if (layer) {
      const auto mv = to_view(mean_c, "mean");
      return reducekit::layer_norm_backward(to_view(dyi, "dy"), xv, shape, mv, rv, w.get(), &dxv,
                                            param_grads ? &dwv : nullptr, param_grads ? &dbv : nullptr, ws,
                                            stream_of(x));
    }
    return reducekit::rms_norm_backward(to_view(dyi, "dy"), xv, shape, rv, w.get(), &dxv,
                                        param_grads ? &dwv : nullptr, want_dbias ? &dbv : nullptr, ws, stream_of(x));
  };
  with_layout_fallback({Operand::in(x), Operand::in(dy)}, run);
  return {dx, dweight, dbias};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_cuda(
    const at::Tensor& dy, const at::Tensor& x, at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, bool param_grads, at::ScalarType param_dtype) {
  return norm_backward(true, dy, x, normalized_shape, mean, rstd, weight, param_grads, param_dtype, false);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_backward_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                                      at::IntArrayRef normalized_shape,
                                                                      const at::Tensor& rstd,
                                                                      const std::optional<at::Tensor>& weight,
                                                                      bool param_grads, at::ScalarType param_dtype,
                                                                      bool bias_grad) {
  return norm_backward(false, dy, x, normalized_shape, std::nullopt, rstd, weight, param_grads, param_dtype,
                       bias_grad);
}

// CPU tensors get the same clear message as the core gives, not a dispatcher error.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_cpu(const at::Tensor& x, at::IntArrayRef,
                                                              const std::optional<at::Tensor>&,
                                                              const std::optional<at::Tensor>&, double) {
  check_cuda(x, "input");
  return {x, x, x};
}
std::tuple<at::Tensor, at::Tensor> rms_norm_cpu(const at::Tensor& x, at::IntArrayRef, const std::optional<at::Tensor>&,
                                                double, const std::optional<at::Tensor>&) {
  check_cuda(x, "input");
  return {x, x};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm_cpu(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, double) {
  check_cuda(x, "input");
  check_cuda(residual, "residual");
  return {x, x, x, x};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_cpu(const at::Tensor& x, const at::Tensor& residual,
                                                                at::IntArrayRef, const std::optional<at::Tensor>&,
                                                                double, const std::optional<at::Tensor>&) {
  check_cuda(x, "input");
  check_cuda(residual, "residual");
  return {x, x, x};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                                       at::IntArrayRef, const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       const std::optional<at::Tensor>&, bool,
                                                                       at::ScalarType) {
  check_cuda(dy, "dy");
  check_cuda(x, "x");
  return {x, x, x};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                                     at::IntArrayRef, const at::Tensor&,
                                                                     const std::optional<at::Tensor>&, bool,
                                                                     at::ScalarType, bool) {
  check_cuda(dy, "dy");
  check_cuda(x, "x");
  return {x, x, x};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(reducekit, m) {
  m.def("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05)"
        " -> (Tensor, Tensor, Tensor)");
  // rms_norm's bias comes last, so positional calls written before it keep their meaning.
  m.def("rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float eps=1e-06, Tensor? bias=None)"
        " -> (Tensor, Tensor)");
  m.def("add_layer_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None,"
        " float eps=1e-05) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("add_rms_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight=None, float eps=1e-06,"
        " Tensor? bias=None) -> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor dy, Tensor x, int[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight,"
        " bool param_grads, ScalarType param_dtype) -> (Tensor, Tensor, Tensor)");
  // (dx, dweight, dbias); dbias is computed when bias_grad (the forward had a bias), else [0].
  m.def("rms_norm_backward(Tensor dy, Tensor x, int[] normalized_shape, Tensor rstd, Tensor? weight,"
        " bool param_grads, ScalarType param_dtype, bool bias_grad=False) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(reducekit, CUDA, m) {
  m.impl("layer_norm", &layer_norm_cuda);
  m.impl("rms_norm", &rms_norm_cuda);
  m.impl("add_layer_norm", &add_layer_norm_cuda);
  m.impl("add_rms_norm", &add_rms_norm_cuda);
  m.impl("layer_norm_backward", &layer_norm_backward_cuda);
  m.impl("rms_norm_backward", &rms_norm_backward_cuda);
}

TORCH_LIBRARY_IMPL(reducekit, CPU, m) {
  m.impl("layer_norm", &layer_norm_cpu);
  m.impl("rms_norm", &rms_norm_cpu);
  m.impl("add_layer_norm", &add_layer_norm_cpu);
  m.impl("add_rms_norm", &add_rms_norm_cpu);
  m.impl("layer_norm_backward", &layer_norm_backward_cpu);
  m.impl("rms_norm_backward", &rms_norm_backward_cpu);
}
