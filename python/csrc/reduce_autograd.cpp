// SPDX-License-Identifier: Apache-2.0
// Autograd of the reductions, in C++ as softmax's (softmax_ops.cpp) and the norms' (norm_autograd.cpp):
// the Python kernel of torch.library.register_autograd sat in front of every call, grad or no
// grad, and cost as much host time as the rest of it (torch.ops.reducekit.sum 25 us a call,
// torch.sum 13). A call with nothing to record goes straight below autograd, as that
// kernel's did; otherwise a Function runs the op below autograd and keeps x (and the output
// where backward reads it).
//
// The backward formulas are those the Python ones were, ATen ops on the saved input in the same
// order and dtypes. Sizes are read as SymInts: torch.compile (dynamic=True, opcheck) traces
// backward with symbolic shapes, where Tensor::sizes() throws.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "reducekit/reducekit.hpp"
#include "torch_util.hpp"

namespace {

using at::Tensor;
using c10::SymFloat;
using c10::SymInt;
using reducekit::ReduceOp;
using reducekit_torch::find_op;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptionalType = std::optional<at::ScalarType>;

constexpr bool is_moment(ReduceOp op) {
  return op == ReduceOp::kVar || op == ReduceOp::kStd || op == ReduceOp::kVarMean || op == ReduceOp::kStdMean;
}
// The ops whose backward reads the (first) output besides x.
constexpr bool saves_output(ReduceOp op) {
  return op == ReduceOp::kAmax || op == ReduceOp::kAmin || op == ReduceOp::kLogsumexp || op == ReduceOp::kStd ||
         op == ReduceOp::kStdMean;
}

template <class Signature> c10::TypedOperatorHandle<Signature> find_reduce_op(ReduceOp op) {
  return find_op<Signature>(("reducekit::" + std::string(reducekit::reduce_op_name(op))).c_str());
}

// The op called below autograd; its outputs as a list. correction is read by the moments only,
// dtype by sum and mean only.
template <ReduceOp kOp>
variable_list run_below_autograd(const Tensor& x, at::OptionalIntArrayRef dim, bool keepdim, double correction,
                                 OptionalType dtype) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kMean) {
    static const auto op = find_reduce_op<Tensor(const Tensor&, at::OptionalIntArrayRef, bool, OptionalType)>(kOp);
    return {op.call(x, dim, keepdim, dtype)};
  } else if constexpr (reducekit::reduce_op_has_mean_output(kOp)) {
    static const auto op =
        find_reduce_op<std::tuple<Tensor, Tensor>(const Tensor&, at::OptionalIntArrayRef, double, bool)>(kOp);
    auto [first, mean] = op.call(x, dim, correction, keepdim);
    return {first, mean};
  } else if constexpr (is_moment(kOp)) {
    static const auto op = find_reduce_op<Tensor(const Tensor&, at::OptionalIntArrayRef, double, bool)>(kOp);
    return {op.call(x, dim, correction, keepdim)};
  } else {
    static const auto op = find_reduce_op<Tensor(const Tensor&, at::OptionalIntArrayRef, bool)>(kOp);
    return {op.call(x, dim, keepdim)};
  }
}

// ----------------------------------------------------------------------------- backward

// What backward reads: the saved x and forward's arguments.
struct Geometry {
  Tensor x;
  std::vector<int64_t> dim;      // forward's dim argument; empty: every dim (None and [] alike)
  std::vector<int64_t> reduced;  // the dims combined, wrapped and ascending; none for a rank-0 x
  bool keepdim;
  double correction;

  Geometry(AutogradContext* ctx, Tensor saved_x)
      : x(std::move(saved_x)),
        dim(ctx->saved_data["dim"].toIntVector()),
        keepdim(ctx->saved_data["keepdim"].toBool()),
        correction(ctx->saved_data["correction"].toDouble()) {
    const int64_t rank = x.dim();
    if (rank == 0) return;
    if (dim.empty()) {
      for (int64_t d = 0; d < rank; ++d) reduced.push_back(d);
      return;
    }
    for (const int64_t d : dim) reduced.push_back(at::maybe_wrap_dim(d, rank));  // forward refused repeats
    std::sort(reduced.begin(), reduced.end());
  }

  // Elements in each reduced set (1 for a rank-0 x).
  SymInt count() const {
    SymInt n = 1;
    for (const int64_t d : reduced) n = n * x.sym_size(d);
    return n;
  }

  // A tensor of the output's shape (a gradient, an output) broadcast back over x's reduced dims.
  Tensor expand(Tensor t) const {
    if (!keepdim)
      for (const int64_t d : reduced) t = t.unsqueeze(d);
    return t.expand_symint(x.sym_sizes());
  }
};

bool is_16bit(const Tensor& t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }

// 16-bit tensors in float32, others as they are: where the backward formulas of var and std
// compute. In float16 their intermediates overflow where the gradient does not: x - mean reaches
// twice x's largest value (62336 - (-5737) is inf), 2 std passes 65504 for std above 32752, and
// inf * 0 then gives NaN.
Tensor opmath(const Tensor& t) { return is_16bit(t) ? t.to(at::kFloat) : t; }

// d prod / d x_i = product of the others: exclusive prefix and suffix products over the reduced
// set, exact where x holds zeros (dividing prod by x_i is not).
Tensor prod_grad(const Geometry& geo, const Tensor& g) {
  const Tensor& x = geo.x;
  if (x.sym_numel() == 0) return at::zeros_like(x);
  std::vector<int64_t> perm;  // kept dims, then reduced dims
  SymInt rows = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::binary_search(geo.reduced.begin(), geo.reduced.end(), d)) continue;
    perm.push_back(d);
    rows = rows * x.sym_size(d);
  }
  perm.insert(perm.end(), geo.reduced.begin(), geo.reduced.end());
  const Tensor moved = x.permute(perm).reshape_symint({rows, -1});
  const Tensor ones = at::ones_like(moved.slice(1, 0, 1));
  const Tensor prefix = at::cumprod(at::cat({ones, moved.slice(1, 0, -1)}, 1), 1);
  const Tensor suffix = at::cumprod(at::cat({ones, moved.flip({1}).slice(1, 0, -1)}, 1), 1).flip({1});
  std::vector<SymInt> moved_sizes;
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    moved_sizes.push_back(x.sym_size(perm[i]));
    inverse[perm[i]] = static_cast<int64_t>(i);
  }
  const Tensor others = (prefix * suffix * g.reshape({-1, 1})).reshape_symint(moved_sizes);
  return others.permute(inverse).contiguous();
}

// torch's amax/amin gradient: split evenly among the elements equal to the result.
Tensor extremum_grad(const Geometry& geo, const Tensor& g, const Tensor& y) {
  const Tensor mask = (geo.x == geo.expand(y)).to(g.scalar_type());
  const Tensor count = geo.reduced.empty() ? mask : mask.sum(geo.reduced, /*keepdim=*/true);
  return geo.expand(g) * mask / count;
}

// dx = g exp(x - y). A 16-bit y is rounded at its own magnitude (bfloat16 at 1e4: by up to 32),
// which exp(x - y) turns into a factor of up to e^32: for 16-bit x, y is formed again in float32
// from x (by reducekit's logsumexp, through the dispatcher as any call) and the gradient computed
// there, rounded once.
Tensor logsumexp_grad(const Geometry& geo, const Tensor& g, const Tensor& y) {
  const Tensor& x = geo.x;
  if (!is_16bit(x)) return geo.expand(g) * at::exp(x - geo.expand(y));
  static const auto op = find_reduce_op<Tensor(const Tensor&, at::OptionalIntArrayRef, bool)>(ReduceOp::kLogsumexp);
  const Tensor x32 = x.to(at::kFloat);
  const Tensor y32 = op.call(x32, geo.dim, geo.keepdim);
  return (geo.expand(g.to(at::kFloat)) * at::exp(x32 - geo.expand(y32))).to(x.scalar_type());
}

// x - mean over the reduced dims, in opmath's dtype (a set of one dim-less value: 0).
Tensor deviations(const Geometry& geo) {
  const Tensor x = opmath(geo.x);
  return x - (geo.reduced.empty() ? x : x.mean(geo.reduced, /*keepdim=*/true));
}

// dvar/dx * g_var = 2 (x - mean) / (n - correction) * g_var, in opmath's dtype. n - correction 0
// gives inf (NaN where x equals the mean), as torch's double arithmetic does: 2.0 / +0.0.
Tensor var_grad(const Geometry& geo, const Tensor& g_var, const Tensor& d) {
  const SymFloat scale = SymFloat(2.0) / (SymFloat(geo.count()) - geo.correction);
  return geo.expand(g_var.to(d.scalar_type())) * scale * d;
}

// d std = d var / (2 std), in opmath's dtype; a constant set (std 0) gets no gradient, as torch.
// A 16-bit std that overflowed (a finite set whose std passes the dtype's largest value) is
// recomputed in float32 from the deviations: inf there would zero a finite gradient.
Tensor std_to_var_grad(const Geometry& geo, const Tensor& g, const Tensor& std, const Tensor& d) {
  const Tensor g32 = opmath(g);
  Tensor std32 = opmath(std);
  if (is_16bit(std)) {
    const SymFloat dof = (SymFloat(geo.count()) - geo.correction).max(0.0);
    const Tensor square = d.square();
    const Tensor m2 = geo.reduced.empty() ? square : square.sum(geo.reduced, geo.keepdim);
    std32 = at::where(std.isinf(), (m2.reshape_symint(std.sym_sizes()) / dof).sqrt(), std32);
  }
  return at::where(std32 == 0, at::zeros_like(g32), g32 / (2 * std32));
}

// The moments with the mean as a second output. Both gradients are there: undefined ones are
// materialized as zeros (the Function's default, as the Python Function's was).
Tensor moments_grad(const Geometry& geo, bool first_is_std, Tensor g_first, const Tensor& g_mean, const Tensor& std) {
  const Tensor& x = geo.x;
  const Tensor d = deviations(geo);
  if (first_is_std) g_first = std_to_var_grad(geo, g_first, std, d);
  // Summed onto zeros as the Python formula was: 0 + -0 is +0, so zero gradients keep its sign.
  Tensor gx = at::zeros_like(x, x.options().dtype(d.scalar_type())) + var_grad(geo, g_first, d);
  gx = gx + geo.expand(g_mean.to(gx.scalar_type())) / geo.count();
  return gx.to(x.scalar_type());
}

// One Function for every differentiable reduction; kOp picks the backward. Inputs as apply()
// takes them: (x, dim, keepdim, correction, dtype); backward returns one grad per argument.
template <ReduceOp kOp> class ReduceAutograd : public torch::autograd::Function<ReduceAutograd<kOp>> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                               double correction, OptionalType dtype) {
    variable_list out = run_below_autograd<kOp>(x, dim, keepdim, correction, dtype);
    if constexpr (saves_output(kOp)) {
      ctx->save_for_backward({x, out[0]});
    } else {
      ctx->save_for_backward({x});
    }
    ctx->saved_data["dim"] = dim.has_value() ? dim->vec() : std::vector<int64_t>();
    ctx->saved_data["keepdim"] = keepdim;
    ctx->saved_data["correction"] = correction;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Geometry geo(ctx, saved[0]);
    const Tensor& x = geo.x;
    const Tensor& g = grads[0];
    Tensor dx;
    if constexpr (kOp == ReduceOp::kSum) {
      dx = geo.expand(g).to(x.scalar_type());
    } else if constexpr (kOp == ReduceOp::kMean) {
      dx = (geo.expand(g) / geo.count()).to(x.scalar_type());
    } else if constexpr (kOp == ReduceOp::kProd) {
      dx = prod_grad(geo, g);
    } else if constexpr (kOp == ReduceOp::kAmax || kOp == ReduceOp::kAmin) {
      dx = extremum_grad(geo, g, saved[1]);
    } else if constexpr (kOp == ReduceOp::kLogsumexp) {
      dx = logsumexp_grad(geo, g, saved[1]);
    } else if constexpr (kOp == ReduceOp::kVar) {
      dx = var_grad(geo, g, deviations(geo)).to(x.scalar_type());
    } else if constexpr (kOp == ReduceOp::kStd) {
      const Tensor d = deviations(geo);
      dx = var_grad(geo, std_to_var_grad(geo, g, saved[1], d), d).to(x.scalar_type());
    } else {
      static_assert(reducekit::reduce_op_has_mean_output(kOp));
      dx = moments_grad(geo, kOp == ReduceOp::kStdMean, g, grads[1], kOp == ReduceOp::kStdMean ? saved[1] : Tensor());
    }
    return {dx, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// The Autograd kernels. A call with nothing to record (grad mode off, or x needing no gradient)
// runs the op below autograd at once: no node is made, so an eager call costs what the CUDA
// kernel's adapter costs plus one dispatch.
template <ReduceOp kOp>
variable_list reduce_autograd(const Tensor& x, at::OptionalIntArrayRef dim, bool keepdim, double correction,
                              OptionalType dtype) {
  if (!(at::GradMode::is_enabled() && x.requires_grad()))
    return run_below_autograd<kOp>(x, dim, keepdim, correction, dtype);
  return ReduceAutograd<kOp>::apply(x, dim, keepdim, correction, dtype);
}

template <ReduceOp kOp>
Tensor typed_autograd(const Tensor& x, at::OptionalIntArrayRef dim, bool keepdim, OptionalType dtype) {
  return reduce_autograd<kOp>(x, dim, keepdim, 0.0, dtype)[0];
}
template <ReduceOp kOp> Tensor plain_autograd(const Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  return reduce_autograd<kOp>(x, dim, keepdim, 0.0, std::nullopt)[0];
}
template <ReduceOp kOp>
Tensor moment_autograd(const Tensor& x, at::OptionalIntArrayRef dim, double correction, bool keepdim) {
  return reduce_autograd<kOp>(x, dim, keepdim, correction, std::nullopt)[0];
}
template <ReduceOp kOp>
std::tuple<Tensor, Tensor> moment_pair_autograd(const Tensor& x, at::OptionalIntArrayRef dim, double correction,
                                                bool keepdim) {
  const variable_list out = reduce_autograd<kOp>(x, dim, keepdim, correction, std::nullopt);
  return {out[0], out[1]};
}

// argmax/argmin have no gradient (int64 indices): their kernel here only goes below autograd,
// unboxed, where torch's fallback for ops without one is boxed and inspects every argument.
template <ReduceOp kOp> Tensor index_autograd(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  static const auto op = find_reduce_op<Tensor(const Tensor&, std::optional<int64_t>, bool)>(kOp);
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, dim, keepdim);
}

}  // namespace

TORCH_LIBRARY_IMPL(reducekit, Autograd, m) {
  m.impl("sum", &typed_autograd<ReduceOp::kSum>);
  m.impl("mean", &typed_autograd<ReduceOp::kMean>);
  m.impl("prod", &plain_autograd<ReduceOp::kProd>);
  m.impl("amax", &plain_autograd<ReduceOp::kAmax>);
  m.impl("amin", &plain_autograd<ReduceOp::kAmin>);
  m.impl("argmax", &index_autograd<ReduceOp::kArgmax>);
  m.impl("argmin", &index_autograd<ReduceOp::kArgmin>);
  m.impl("logsumexp", &plain_autograd<ReduceOp::kLogsumexp>);
  m.impl("var", &moment_autograd<ReduceOp::kVar>);
  m.impl("std", &moment_autograd<ReduceOp::kStd>);
  m.impl("var_mean", &moment_pair_autograd<ReduceOp::kVarMean>);
  m.impl("std_mean", &moment_pair_autograd<ReduceOp::kStdMean>);
}
