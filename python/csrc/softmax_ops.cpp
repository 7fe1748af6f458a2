// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit.*: thin adapters from at::Tensor to the C++ API. They allocate outputs,
// pick the current stream and device, and turn a failed Status into a Python exception; all
// checking and planning lives in the core, but for dim's range: checked here, as torch does, so
// that it raises torch's IndexError (a failed Status is a RuntimeError).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

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

// Autograd of softmax and log_softmax, in C++, as torch's own generated autograd does it: a
// backward node made by hand (the node, the input's edge, y saved as an output) rather than a
// torch::autograd::Function, whose general bookkeeping cost about 0.8 us more host time a call
// with grad than torch.softmax's (bench/host_overhead.py). The node also serves compiled autograd
// (compiled_args, apply_with_saved) as the generated nodes do.
template <bool kLog> struct SoftmaxBackwardNode final : torch::autograd::Node {
  int64_t dim = 0;
  torch::autograd::SavedVariable y;

  std::string name() const override { return kLog ? "reducekit::LogSoftmaxBackward" : "reducekit::SoftmaxBackward"; }

  void release_variables() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    y.reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    static const auto op = reducekit_torch::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>(
        kLog ? "reducekit::log_softmax_backward" : "reducekit::softmax_backward");
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!task_should_compute_output(0) || !grads[0].defined()) return {at::Tensor()};
    return {op.call(y.unpack(shared_from_this()), grads[0], dim)};
  }

  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(dim);
    args.collect(y, true);
  }

  torch::autograd::variable_list apply_with_saved(const torch::autograd::variable_list& grads,
                                                  torch::dynamo::autograd::SwapSavedVariables& saved) override {
    saved.before(y);
    torch::autograd::variable_list out = apply(torch::autograd::variable_list(grads));
    saved.after(y);
    return out;
  }
};

// The op below autograd; with grad mode on and x requiring grad, y gets the backward node.
template <bool kLog> at::Tensor softmax_autograd(const at::Tensor& x, int64_t dim) {
  static const auto op = reducekit_torch::find_op<at::Tensor(const at::Tensor&, int64_t)>(
      kLog ? "reducekit::log_softmax" : "reducekit::softmax");
  const bool record = at::GradMode::is_enabled() && x.requires_grad();
  TORCH_CHECK(!torch::autograd::isFwGradDefined(x), kLog ? "log_softmax" : "softmax",
              ": forward-mode AD is not supported by reducekit's kernels");
  std::shared_ptr<SoftmaxBackwardNode<kLog>> node;
  if (record) {
    node = std::shared_ptr<SoftmaxBackwardNode<kLog>>(new SoftmaxBackwardNode<kLog>(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(x));
    node->dim = dim;
  }
  at::Tensor y;
  {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    y = op.call(x, dim);
  }
  if (record) {
    torch::autograd::set_history(y, node);
    node->y = torch::autograd::SavedVariable(y, /*is_output=*/true);
  }
  return y;
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
