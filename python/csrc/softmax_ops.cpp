// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit.*: thin adapters from at::Tensor to the C++ API. They allocate outputs,
// pick the current stream and device, and turn a failed Status into a Python exception; all
// checking and planning lives in the core, but for dim's range: checked here, as torch does, so
// that it raises torch's IndexError (a failed Status is a RuntimeError).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <cstddef>

#include "reducekit/reducekit.hpp"
#include "torch_util.hpp"

namespace {

using reducekit_torch::check_cuda;
using reducekit_torch::device_empty;
using reducekit_torch::Operand;
using reducekit_torch::to_view;

// One input of a rowwise op, and the name this layer's messages (check_cuda, to_view) give it.
struct Input {
  const at::Tensor* tensor;
  const char* name;
};

// Runs a rowwise op over `dim`. Layouts the kernels cannot address directly (dim not innermost,
// rows that do not merge) go through a contiguous copy with dim moved last (with_layout_fallback).
template <std::size_t N, class Run> at::Tensor rowwise(const Input (&inputs)[N], int64_t dim, Run run) {
  const at::Tensor& first = *inputs[0].tensor;
  for (const Input& in : inputs) check_cuda(*in.tensor, in.name);
  // torch's check and words, raised as c10::IndexError (Python's IndexError, as torch.softmax's)
  const int64_t d = at::maybe_wrap_dim(dim, first.dim());
  const c10::cuda::CUDAGuard guard(first.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(first.get_device()).stream();
  at::Tensor out = device_empty(first.sizes(), first.options());
  Operand operands[N + 1];
  for (std::size_t i = 0; i < N; ++i) operands[i] = Operand::in(*inputs[i].tensor);
  operands[N] = Operand::out(out);
  reducekit_torch::with_layout_fallback(
      operands,
      [&](const auto& t, bool relaid) {
        std::array<reducekit::TensorView, N> views;
        for (std::size_t i = 0; i < N; ++i) views[i] = to_view(t[i], inputs[i].name);
        return run(views, to_view(t[N], "out"), relaid ? -1 : dim, stream);
      },
      reducekit_torch::DimLast{d});
  return out;
}

// Forward ops on rows long enough to split over a cooperative grid need a workspace: counters
// from the per-stream zeroed buffer, chunk statistics from the caching allocator (torch_util.hpp).
template <class Forward>
reducekit::Status run_forward(const at::Tensor& x, const reducekit::TensorView& xv, const reducekit::TensorView& out,
                              int64_t dim, cudaStream_t stream, Forward forward) {
  // kUnsupported layouts go through rowwise's contiguous copy.
  return reducekit_torch::with_call_workspace<reducekit::SoftmaxRequirements>(
      x, stream, [&](auto* req) { return reducekit::softmax_requirements(xv, dim, req); },
      [&](const reducekit::Workspace& ws) { return forward(xv, out, dim, ws, stream); });
}

at::Tensor softmax_cuda(const at::Tensor& x, int64_t dim) {
  return rowwise({{&x, "input"}}, dim, [&x](const auto& in, const auto& out, int64_t d, cudaStream_t s) {
    return run_forward(x, in[0], out, d, s, [](const auto&... args) { return reducekit::softmax(args...); });
  });
}

at::Tensor log_softmax_cuda(const at::Tensor& x, int64_t dim) {
  return rowwise({{&x, "input"}}, dim, [&x](const auto& in, const auto& out, int64_t d, cudaStream_t s) {
    return run_forward(x, in[0], out, d, s, [](const auto&... args) { return reducekit::log_softmax(args...); });
  });
}

at::Tensor softmax_backward_cuda(const at::Tensor& y, const at::Tensor& dy, int64_t dim) {
  return rowwise({{&y, "y"}, {&dy, "dy"}}, dim, [](const auto& in, const auto& out, int64_t d, cudaStream_t s) {
    return reducekit::softmax_backward(in[0], in[1], out, d, s);
  });
}

at::Tensor log_softmax_backward_cuda(const at::Tensor& y, const at::Tensor& dy, int64_t dim) {
  return rowwise({{&y, "y"}, {&dy, "dy"}}, dim, [](const auto& in, const auto& out, int64_t d, cudaStream_t s) {
    return reducekit::log_softmax_backward(in[0], in[1], out, d, s);
  });
}

// CPU tensors get the same clear message as the core gives, not a dispatcher error.
at::Tensor reject_cpu_unary(const at::Tensor& x, int64_t) {
  check_cuda(x, "input");
  return x;
}
at::Tensor reject_cpu_binary(const at::Tensor& y, const at::Tensor& dy, int64_t) {
  check_cuda(y, "y");
  check_cuda(dy, "dy");
  return y;
}

// Autograd of softmax and log_softmax, in C++: torch.library.register_autograd's Python kernel
// cost about 25 us of host time a call with grad (run 22: 35 us against torch.softmax's 9).
// Forward runs the op below autograd and keeps y; backward is the matching backward op.
template <bool kLog> class SoftmaxAutograd : public torch::autograd::Function<SoftmaxAutograd<kLog>> {
 public:
  static at::Tensor run(const at::Tensor& x, int64_t dim) {
    static const auto op = reducekit_torch::find_op<at::Tensor(const at::Tensor&, int64_t)>(
        kLog ? "reducekit::log_softmax" : "reducekit::softmax");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(x, dim);
  }
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t dim) {
    at::Tensor y = run(x, dim);
    ctx->save_for_backward({y});
    ctx->saved_data["dim"] = dim;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = reducekit_torch::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>(
        kLog ? "reducekit::log_softmax_backward" : "reducekit::softmax_backward");
    const at::Tensor y = ctx->get_saved_variables()[0];
    return {op.call(y, grads[0], ctx->saved_data["dim"].toInt()), at::Tensor()};
  }
};

// A call with nothing to record (grad mode off, or x needing no gradient) runs the op below
// autograd at once: no node is made.
template <bool kLog> at::Tensor softmax_autograd(const at::Tensor& x, int64_t dim) {
  if (!(at::GradMode::is_enabled() && x.requires_grad())) return SoftmaxAutograd<kLog>::run(x, dim);
  return SoftmaxAutograd<kLog>::apply(x, dim);
}

}  // namespace

TORCH_LIBRARY(reducekit, m) {
  m.def("softmax(Tensor input, int dim) -> Tensor");
  m.def("log_softmax(Tensor input, int dim) -> Tensor");
  m.def("softmax_backward(Tensor y, Tensor dy, int dim) -> Tensor");
  m.def("log_softmax_backward(Tensor y, Tensor dy, int dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(reducekit, CUDA, m) {
  m.impl("softmax", &softmax_cuda);
  m.impl("log_softmax", &log_softmax_cuda);
  m.impl("softmax_backward", &softmax_backward_cuda);
  m.impl("log_softmax_backward", &log_softmax_backward_cuda);
}

TORCH_LIBRARY_IMPL(reducekit, Autograd, m) {
  m.impl("softmax", &softmax_autograd<false>);
  m.impl("log_softmax", &softmax_autograd<true>);
}

TORCH_LIBRARY_IMPL(reducekit, CPU, m) {
  m.impl("softmax", &reject_cpu_unary);
  m.impl("log_softmax", &reject_cpu_unary);
  m.impl("softmax_backward", &reject_cpu_binary);
  m.impl("log_softmax_backward", &reject_cpu_binary);
}
