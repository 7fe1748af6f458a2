// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit reductions: sum, mean, prod, amax, amin, argmax, argmin, logsumexp, var,
// std, var_mean, std_mean. Thin: outputs and the workspace come from torch's caching allocator,
// layouts the core cannot read in place go through the permuted contiguous copy the core asks
// for (ReduceRequirements::needs_copy), and every check lives in the core but three made here
// first, in torch's words and exception types: dims out of range, empty sets of the extrema, and
// dtype= (check_arguments).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "reducekit/reducekit.hpp"
#include "torch_util.hpp"

namespace {

using reducekit::ReduceOp;
using reducekit_torch::check_cuda;
using reducekit_torch::device_empty;
using reducekit_torch::throw_if_failed;
using reducekit_torch::to_view;

// torch's dim argument: None and (legacy) [] reduce every dim.
struct Dims {
  std::vector<int64_t> list;
  bool all = true;

  explicit Dims(at::OptionalIntArrayRef dim) {
    if (dim.has_value() && !dim->empty()) {
      list.assign(dim->begin(), dim->end());
      all = false;
    }
  }
  reducekit::DimList view() const {
    return all ? reducekit::DimList::every() : reducekit::DimList::of(list.data(), static_cast<int>(list.size()));
  }
  // How many of x's dims are reduced (dims are already validated by the core).
  int64_t count(int64_t rank) const {
    if (all || rank == 0) return rank;
    std::set<int64_t> wrapped;
    for (int64_t d : list) wrapped.insert(d < 0 ? d + rank : d);
    return static_cast<int64_t>(wrapped.size());
  }
};

// Checked before the core sees the call, as torch checks them: the core's failed Status is a
// RuntimeError, and its words are its own.
//  - A dim out of range is torch's IndexError ("Dimension out of range (expected ...)").
//  - An empty reduced set of the extrema is ATen's zero_numel_check_dims: an IndexError naming the
//    dim (argmax/argmin name it wrapped, amax/amin as given); with no dim given, argmax/argmin's
//    is an IndexError and amax/amin's a RuntimeError. x.size(d) raises torch's out-of-range
//    IndexError first, as ATen's does.
//  - dtype= of sum and mean names the output's type; the core would blame `out`, made from it.
void check_arguments(ReduceOp op, const at::Tensor& x, const Dims& dims, std::optional<at::ScalarType> dtype) {
  const bool arg = reducekit::reduce_op_gives_indices(op);
  if ((arg || op == ReduceOp::kAmax || op == ReduceOp::kAmin) && x.numel() == 0) {
    const std::string name = std::string(reducekit::reduce_op_name(op)) + "()";
    TORCH_CHECK_INDEX(!dims.all || !arg, name, ": Expected reduction dim to be specified for input.numel() == 0.");
    TORCH_CHECK(!dims.all, name, ": Expected reduction dim to be specified for input.numel() == 0. ",
                "Specify the reduction dim with the 'dim' argument.");
    for (const int64_t d : dims.list)
      TORCH_CHECK_INDEX(x.size(d) != 0, name, ": Expected reduction dim ", arg ? at::maybe_wrap_dim(d, x.dim()) : d,
                        " to have non-zero size.");
  }
  for (const int64_t d : dims.list) at::maybe_wrap_dim(d, x.dim());
  if (dtype.has_value()) {
    const at::ScalarType t = *dtype;
    TORCH_CHECK(t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16, "dtype: ",
                c10::getDtypeNames(t).first, " is not supported; ", reducekit::reduce_op_name(op),
                " returns float32, float64, float16 or bfloat16");
  }
}

at::ScalarType output_type(ReduceOp op, const at::Tensor& x, std::optional<at::ScalarType> dtype) {
  if (reducekit::reduce_op_gives_indices(op)) return at::kLong;
  if ((op == ReduceOp::kSum || op == ReduceOp::kMean) && dtype.has_value()) return *dtype;
  return x.scalar_type();
}

// Runs `op` and returns (out, mean_out); mean_out is undefined unless the op has one.
std::tuple<at::Tensor, at::Tensor> run_reduce(ReduceOp op, const at::Tensor& x, at::OptionalIntArrayRef dim,
                                              bool keepdim, double correction,
                                              std::optional<at::ScalarType> dtype = std::nullopt) {
  check_cuda(x, "input");
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  const Dims dims(dim);
  check_arguments(op, x, dims, dtype);
  reducekit::ReduceRequirements req;
  throw_if_failed(reducekit::reduce_requirements(op, to_view(x, "input"), dims.view(), keepdim, &req));

  const std::vector<int64_t> out_sizes(req.out_sizes, req.out_sizes + req.out_rank);
  at::Tensor out = device_empty(out_sizes, x.options().dtype(output_type(op, x, dtype)));
  at::Tensor mean = reducekit::reduce_op_has_mean_output(op) ? device_empty(out_sizes, x.options()) : at::Tensor();

  // The core's fallback: kept dims first, reduced dims last, contiguous; reduce the trailing dims.
  // Not with_layout_fallback's retry: the core names this layout (needs_copy, permutation) before
  // the call, and the outputs are views of out, so nothing is tried twice or copied back.
  at::Tensor src = x, out_call = out, mean_call = mean;
  std::vector<int64_t> trailing;
  reducekit::DimList dim_list = dims.view();
  bool keep = keepdim;
  if (req.needs_copy) {
    const int64_t rank = x.dim(), kept = rank - dims.count(rank);
    src = x.permute(std::vector<int64_t>(req.permutation, req.permutation + rank)).contiguous();
    for (int64_t d = kept; d < rank; ++d) trailing.push_back(d);
    dim_list = reducekit::DimList::of(trailing.data(), static_cast<int>(trailing.size()));
    keep = false;
    const std::vector<int64_t> kept_sizes(src.sizes().begin(), src.sizes().begin() + kept);
    out_call = out.view(kept_sizes);
    if (mean.defined()) mean_call = mean.view(kept_sizes);
    throw_if_failed(reducekit::reduce_requirements(op, to_view(src, "input"), dim_list, keep, &req));
  }

  const reducekit_torch::CallWorkspace workspace(x, stream, req.workspace_bytes, req.workspace_zeroed_bytes);
  const reducekit::Workspace ws = workspace.ws;
  const reducekit::TensorView mean_view = mean.defined() ? to_view(mean_call, "mean") : reducekit::TensorView{};
  throw_if_failed(reducekit::reduce(op, to_view(src, "input"), dim_list, keep, correction, to_view(out_call, "out"),
                                    mean_view, ws, stream));
  return {out, mean};
}

at::Tensor single(ReduceOp op, const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim, double correction = 0,
                  std::optional<at::ScalarType> dtype = std::nullopt) {
  return std::get<0>(run_reduce(op, x, dim, keepdim, correction, dtype));
}

at::Tensor sum_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  return single(ReduceOp::kSum, x, dim, keepdim, 0, dtype);
}
at::Tensor mean_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype) {
  return single(ReduceOp::kMean, x, dim, keepdim, 0, dtype);
}
at::Tensor prod_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  return single(ReduceOp::kProd, x, dim, keepdim);
}
at::Tensor amax_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  return single(ReduceOp::kAmax, x, dim, keepdim);
}
at::Tensor amin_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  return single(ReduceOp::kAmin, x, dim, keepdim);
}
at::Tensor logsumexp_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  return single(ReduceOp::kLogsumexp, x, dim, keepdim);
}

// argmax/argmin take one dim or None, as torch's.
at::Tensor arg_reduce(ReduceOp op, const at::Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim.has_value()) return single(op, x, std::nullopt, keepdim);
  const int64_t d = *dim;
  return single(op, x, at::IntArrayRef(&d, 1), keepdim);
}
at::Tensor argmax_cuda(const at::Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce(ReduceOp::kArgmax, x, dim, keepdim);
}
at::Tensor argmin_cuda(const at::Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce(ReduceOp::kArgmin, x, dim, keepdim);
}

at::Tensor var_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, double correction, bool keepdim) {
  return single(ReduceOp::kVar, x, dim, keepdim, correction);
}
at::Tensor std_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, double correction, bool keepdim) {
  return single(ReduceOp::kStd, x, dim, keepdim, correction);
}
std::tuple<at::Tensor, at::Tensor> var_mean_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, double correction,
                                                 bool keepdim) {
  return run_reduce(ReduceOp::kVarMean, x, dim, keepdim, correction);
}
std::tuple<at::Tensor, at::Tensor> std_mean_cuda(const at::Tensor& x, at::OptionalIntArrayRef dim, double correction,
                                                 bool keepdim) {
  return run_reduce(ReduceOp::kStdMean, x, dim, keepdim, correction);
}

// CPU tensors get the core's clear message rather than a dispatcher error.
template <typename R, typename... Rest> R reject_cpu(const at::Tensor& x, Rest...) {
  check_cuda(x, "input");
  TORCH_CHECK(false, "input: expected a CUDA tensor");
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(reducekit, m) {
  m.def("sum(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  m.def("mean(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  m.def("prod(Tensor input, int[]? dim=None, bool keepdim=False) -> Tensor");
  m.def("amax(Tensor input, int[]? dim=None, bool keepdim=False) -> Tensor");
  m.def("amin(Tensor input, int[]? dim=None, bool keepdim=False) -> Tensor");
  m.def("argmax(Tensor input, int? dim=None, bool keepdim=False) -> Tensor");
  m.def("argmin(Tensor input, int? dim=None, bool keepdim=False) -> Tensor");
  m.def("logsumexp(Tensor input, int[]? dim=None, bool keepdim=False) -> Tensor");
  m.def("var(Tensor input, int[]? dim=None, float correction=1, bool keepdim=False) -> Tensor");
  m.def("std(Tensor input, int[]? dim=None, float correction=1, bool keepdim=False) -> Tensor");
  m.def("var_mean(Tensor input, int[]? dim=None, float correction=1, bool keepdim=False) -> (Tensor, Tensor)");
  m.def("std_mean(Tensor input, int[]? dim=None, float correction=1, bool keepdim=False) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(reducekit, CUDA, m) {
  m.impl("sum", &sum_cuda);
  m.impl("mean", &mean_cuda);
  m.impl("prod", &prod_cuda);
  m.impl("amax", &amax_cuda);
  m.impl("amin", &amin_cuda);
  m.impl("argmax", &argmax_cuda);
  m.impl("argmin", &argmin_cuda);
  m.impl("logsumexp", &logsumexp_cuda);
  m.impl("var", &var_cuda);
  m.impl("std", &std_cuda);
  m.impl("var_mean", &var_mean_cuda);
  m.impl("std_mean", &std_mean_cuda);
}

TORCH_LIBRARY_IMPL(reducekit, CPU, m) {
  using Tensor = at::Tensor;
  using Pair = std::tuple<at::Tensor, at::Tensor>;
  using Dim = at::OptionalIntArrayRef;
  using Arg = std::optional<int64_t>;
  using Type = std::optional<at::ScalarType>;
  m.impl("sum", &reject_cpu<Tensor, Dim, bool, Type>);
  m.impl("mean", &reject_cpu<Tensor, Dim, bool, Type>);
  m.impl("prod", &reject_cpu<Tensor, Dim, bool>);
  m.impl("amax", &reject_cpu<Tensor, Dim, bool>);
  m.impl("amin", &reject_cpu<Tensor, Dim, bool>);
  m.impl("argmax", &reject_cpu<Tensor, Arg, bool>);
  m.impl("argmin", &reject_cpu<Tensor, Arg, bool>);
  m.impl("logsumexp", &reject_cpu<Tensor, Dim, bool>);
  m.impl("var", &reject_cpu<Tensor, Dim, double, bool>);
  m.impl("std", &reject_cpu<Tensor, Dim, double, bool>);
  m.impl("var_mean", &reject_cpu<Pair, Dim, double, bool>);
  m.impl("std_mean", &reject_cpu<Pair, Dim, double, bool>);
}
