# SPDX-License-Identifier: Apache-2.0
"""The reduction family: functional API mirroring torch's signatures, fake kernels, autograd.

    reducekit.sum(x, dim=None, keepdim=False, *, dtype=None)      torch.sum
    reducekit.mean / prod                                          torch.mean / torch.prod
    reducekit.amax(x, dim=(), keepdim=False) / amin                torch.amax / torch.amin
    reducekit.argmax(x, dim=None, keepdim=False) / argmin          torch.argmax / torch.argmin
    reducekit.logsumexp(x, dim, keepdim=False)                     torch.logsumexp
    reducekit.var(x, dim=None, unbiased=None, keepdim=False, *, correction=None)   and std,
    var_mean, std_mean                                             torch.var & co.

dim may be an int, a list/tuple of ints, or None (every dim; so is an empty list, as in torch).
The kernels are torch.ops.reducekit.* (python/csrc/reduce_ops.cpp); backward formulas here use
torch ops on the saved input.
"""
import builtins
import math

import torch

from ._checks import check_dtype, wrap_dim
from ._dispatch import eager

_ops = torch.ops.reducekit

_sum = eager(_ops.sum)
_mean = eager(_ops.mean)
_prod = eager(_ops.prod)
_amax = eager(_ops.amax)
_amin = eager(_ops.amin)
_logsumexp = eager(_ops.logsumexp)
_var = eager(_ops.var)
_std = eager(_ops.std)
_var_mean = eager(_ops.var_mean)
_std_mean = eager(_ops.std_mean)


# ----------------------------------------------------------------------------- dims and shapes

def _dim_list(dim):
    """torch's dim argument as the ops' int[]?: None for every dim."""
    if dim is None:
        return None
    if isinstance(dim, int):
        return [dim]
    dims = [int(d) for d in dim]
    return dims or None


def _reduced_dims(rank, dim):
    """The set of dims a reduction over `dim` (int[]? or int?) combines, after wrapping."""
    if dim is None:
        return set(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return set(range(rank))
    wrapped = set()
    for d in dims:
        w = wrap_dim(d, rank)
        if w in wrapped:
            raise RuntimeError(f"dim: {w} appears twice")
        wrapped.add(w)
    return wrapped if rank > 0 else set()


def _out_shape(x, dim, keepdim):
    reduced = _reduced_dims(x.dim(), dim)
    return [1 if d in reduced else s for d, s in enumerate(x.shape) if keepdim or d not in reduced]


def _reduced_numel(x, dim):
    return math.prod(x.shape[d] for d in _reduced_dims(x.dim(), dim))


def _expand_to_input(g, x, dim, keepdim):
    """A gradient of the output's shape, broadcast back over the reduced dims of x."""
    if not keepdim:
        for d in sorted(_reduced_dims(x.dim(), dim)):
            g = g.unsqueeze(d)
    return g.expand(x.shape)


# ----------------------------------------------------------------------------- fake kernels
# Each makes the CUDA op's checks first (python/csrc/reduce_ops.cpp, check_arguments), so that a
# bad call raises the same exception, in the same words, when traced.

_EXTREMA = ("amax", "amin", "argmax", "argmin")


def _check_nonempty_set(op, x, dim):
    """torch's errors for an extremum of an empty set (ATen's zero_numel_check_dims): an IndexError
    naming the dim (argmax/argmin name it wrapped, amax/amin as given); with no dim given,
    argmax/argmin's is an IndexError and amax/amin's a RuntimeError."""
    if x.numel() != 0:
        return
    arg = op in ("argmax", "argmin")
    dims = [dim] if isinstance(dim, int) else list(dim or ())
    if not dims:
        if arg:
            raise IndexError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0.")
        raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    for d in dims:
        w = wrap_dim(d, x.dim())
        if x.shape[w] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {w if arg else d} to have non-zero size.")


def _fake_reduce(op):
    """The fake kernel of op (x, dim, keepdim[, dtype]): sum, mean, prod, the extrema, logsumexp."""
    index_dtype = torch.int64 if op in ("argmax", "argmin") else None

    def fake(x, dim=None, keepdim=False, *, dtype=None):
        if op in _EXTREMA:
            _check_nonempty_set(op, x, dim)
        shape = _out_shape(x, dim, keepdim)
        check_dtype(dtype, f"{op} returns")  # only sum and mean take a dtype
        return x.new_empty(shape, dtype=index_dtype or dtype or x.dtype)
    return fake


def _fake_moments(x, dim=None, correction=1.0, keepdim=False):
    return x.new_empty(_out_shape(x, dim, keepdim))


def _fake_moments_pair(x, dim=None, correction=1.0, keepdim=False):
    shape = _out_shape(x, dim, keepdim)
    return x.new_empty(shape), x.new_empty(shape)


for _name in ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp"):
    torch.library.register_fake(f"reducekit::{_name}")(_fake_reduce(_name))
for _name in ("var", "std"):
    torch.library.register_fake(f"reducekit::{_name}")(_fake_moments)
for _name in ("var_mean", "std_mean"):
    torch.library.register_fake(f"reducekit::{_name}")(_fake_moments_pair)


# ----------------------------------------------------------------------------- autograd

def _setup(ctx, inputs, output, keyword_only_inputs=None):
    x, dim, third = inputs[0], inputs[1], inputs[2]
    ctx.dim = dim
    ctx.n_inputs = len(inputs)
    # var/std & co. have (x, dim, correction, keepdim); the others (x, dim, keepdim)
    if len(inputs) == 4:
        ctx.correction, ctx.keepdim = float(third), bool(inputs[3])
    else:
        ctx.correction, ctx.keepdim = None, bool(third)
    outputs = output if isinstance(output, tuple) else (output,)
    ctx.save_for_backward(x, *outputs)


def _grads(ctx, gx):
    return (gx,) + (None,) * (ctx.n_inputs - 1)


def _sum_backward(ctx, g):
    x = ctx.saved_tensors[0]
    return _grads(ctx, _expand_to_input(g, x, ctx.dim, ctx.keepdim).to(x.dtype))


def _mean_backward(ctx, g):
    x = ctx.saved_tensors[0]
    n = _reduced_numel(x, ctx.dim)
    return _grads(ctx, (_expand_to_input(g, x, ctx.dim, ctx.keepdim) / n).to(x.dtype))


def _prod_backward(ctx, g):
    # d prod / d x_i = product of the others: exclusive prefix and suffix products over the reduced
    # set, exact where x holds zeros (dividing prod by x_i is not).
    x = ctx.saved_tensors[0]
    if x.numel() == 0:
        return _grads(ctx, torch.zeros_like(x))
    reduced = sorted(_reduced_dims(x.dim(), ctx.dim))
    kept = [d for d in range(x.dim()) if d not in reduced]
    perm = kept + reduced
    moved = x.permute(perm).reshape(math.prod(x.shape[d] for d in kept), -1)
    ones = torch.ones_like(moved[:, :1])
    prefix = torch.cumprod(torch.cat([ones, moved[:, :-1]], dim=1), dim=1)
    suffix = torch.cumprod(torch.cat([ones, moved.flip(1)[:, :-1]], dim=1), dim=1).flip(1)
    g_rows = g.reshape(-1, 1)
    others = (prefix * suffix * g_rows).reshape([x.shape[d] for d in perm])
    gx = others.permute([perm.index(d) for d in range(x.dim())])
    return _grads(ctx, gx.contiguous())


def _extremum_backward(ctx, g):
    # torch's amax/amin gradient: split evenly among the elements equal to the result
    x, y = ctx.saved_tensors
    reduced = sorted(_reduced_dims(x.dim(), ctx.dim))
    mask = (x == _expand_to_input(y, x, ctx.dim, ctx.keepdim)).to(g.dtype)
    count = mask.sum(dim=reduced, keepdim=True) if reduced else mask
    return _grads(ctx, _expand_to_input(g, x, ctx.dim, ctx.keepdim) * mask / count)


def _logsumexp_backward(ctx, g):
    """dx = g exp(x - y). A 16-bit y is rounded at its own magnitude (bfloat16 at 1e4: by up to
    32), which exp(x - y) turns into a factor of up to e^32: for 16-bit x, y is formed again in
    float32 from x and the gradient computed there, rounded once."""
    x, y = ctx.saved_tensors
    expand = lambda t: _expand_to_input(t, x, ctx.dim, ctx.keepdim)  # noqa: E731
    if x.dtype in (torch.float16, torch.bfloat16):
        x32 = x.float()
        y32 = _logsumexp(x32, ctx.dim, ctx.keepdim)
        return _grads(ctx, (expand(g.float()) * torch.exp(x32 - expand(y32))).to(x.dtype))
    return _grads(ctx, expand(g) * torch.exp(x - expand(y)))


def _opmath(t):
    """16-bit tensors in float32, others as they are: where the backward formulas of var and std
    compute. In float16 their intermediates overflow where the gradient does not: x - mean reaches
    twice x's largest value (62336 - (-5737) is inf), 2 std passes 65504 for std above 32752, and
    inf * 0 then gives NaN. torch's own float16 formula does the same; its float64 one does not."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _deviations(ctx, x):
    """x - mean over the reduced dims, in _opmath's dtype (a set of one dim-less value: 0)."""
    x = _opmath(x)
    reduced = sorted(_reduced_dims(x.dim(), ctx.dim))
    return x - (x.mean(dim=reduced, keepdim=True) if reduced else x)


def _var_grad(ctx, x, g_var, deviations=None):
    """dvar/dx * g_var = 2 (x - mean) / (n - correction) * g_var, in _opmath's dtype."""
    d = _deviations(ctx, x) if deviations is None else deviations
    dof = _reduced_numel(x, ctx.dim) - ctx.correction
    # dof 0 gives inf (NaN where x equals the mean), as torch's double arithmetic does
    scale = 2.0 / dof if dof != 0 else math.inf
    return _expand_to_input(g_var.to(d.dtype), x, ctx.dim, ctx.keepdim) * scale * d


def _std_to_var_grad(ctx, x, g, std, deviations):
    """d std = d var / (2 std), in _opmath's dtype; a constant set (std 0) gets no gradient, as torch.
    A 16-bit std that overflowed (a finite set whose std passes the dtype's largest value) is
    recomputed in float32 from the deviations: inf there would zero a finite gradient."""
    g, std32 = _opmath(g), _opmath(std)
    if std.dtype in (torch.float16, torch.bfloat16):
        reduced = sorted(_reduced_dims(x.dim(), ctx.dim))
        dof = builtins.max(0.0, _reduced_numel(x, ctx.dim) - ctx.correction)
        m2 = deviations.square().sum(dim=reduced, keepdim=ctx.keepdim) if reduced else deviations.square()
        std32 = torch.where(std.isinf(), (m2.reshape(std.shape) / dof).sqrt(), std32)
    return torch.where(std32 == 0, torch.zeros_like(g), g / (2 * std32))


def _var_backward(ctx, g):
    x = ctx.saved_tensors[0]
    return _grads(ctx, _var_grad(ctx, x, g).to(x.dtype))


def _std_backward(ctx, g):
    x, std = ctx.saved_tensors
    d = _deviations(ctx, x)
    return _grads(ctx, _var_grad(ctx, x, _std_to_var_grad(ctx, x, g, std, d), d).to(x.dtype))


def _moments_mean_backward(ctx, x, g_first, g_mean, first_is_std):
    gx = torch.zeros_like(_opmath(x))
    if g_first is not None:
        d = _deviations(ctx, x)
        if first_is_std:
            g_first = _std_to_var_grad(ctx, x, g_first, ctx.saved_tensors[1], d)
        gx = gx + _var_grad(ctx, x, g_first, d)
    if g_mean is not None:
        gx = gx + _expand_to_input(g_mean.to(gx.dtype), x, ctx.dim, ctx.keepdim) / _reduced_numel(x, ctx.dim)
    return _grads(ctx, gx.to(x.dtype))


def _var_mean_backward(ctx, g_var, g_mean):
    return _moments_mean_backward(ctx, ctx.saved_tensors[0], g_var, g_mean, first_is_std=False)


def _std_mean_backward(ctx, g_std, g_mean):
    return _moments_mean_backward(ctx, ctx.saved_tensors[0], g_std, g_mean, first_is_std=True)


for _name, _backward in (("sum", _sum_backward), ("mean", _mean_backward), ("prod", _prod_backward),
                         ("amax", _extremum_backward), ("amin", _extremum_backward),
                         ("logsumexp", _logsumexp_backward), ("var", _var_backward), ("std", _std_backward),
                         ("var_mean", _var_mean_backward), ("std_mean", _std_mean_backward)):
    torch.library.register_autograd(f"reducekit::{_name}", _backward, setup_context=_setup)


# ----------------------------------------------------------------------------- functional API

def sum(x, dim=None, keepdim=False, *, dtype=None):  # noqa: A001 (mirrors torch.sum)
    """torch.sum: float32 accumulation (float64 when x or dtype is float64), deterministic."""
    return _sum(x, _dim_list(dim), keepdim, dtype=dtype)


def mean(x, dim=None, keepdim=False, *, dtype=None):
    """torch.mean; the mean of an empty set is NaN."""
    return _mean(x, _dim_list(dim), keepdim, dtype=dtype)


def prod(x, dim=None, keepdim=False, *, dtype=None):
    """torch.prod (any dims, not only one); dtype casts x first, as torch does."""
    check_dtype(dtype, "prod computes in")  # before the cast, which would make x the culprit
    if dtype is not None:
        x = x.to(dtype)
    return _prod(x, _dim_list(dim), keepdim)


def amax(x, dim=(), keepdim=False):
    """torch.amax: NaN propagates; an empty set raises torch's error (IndexError naming the dim)."""
    return _amax(x, _dim_list(dim), keepdim)


def amin(x, dim=(), keepdim=False):
    """torch.amin."""
    return _amin(x, _dim_list(dim), keepdim)


def argmax(x, dim=None, keepdim=False):
    """torch.argmax: the first NaN, else the first maximum; dim=None indexes x flattened."""
    return _ops.argmax(x, dim, keepdim)


def argmin(x, dim=None, keepdim=False):
    """torch.argmin."""
    return _ops.argmin(x, dim, keepdim)


def logsumexp(x, dim, keepdim=False):
    """torch.logsumexp: all -inf gives -inf, any +inf gives +inf."""
    return _logsumexp(x, _dim_list(dim), keepdim)


def _correction(dim, unbiased, correction):
    """torch.var's argument forms: var(x, dim, *, correction), var(x, dim, unbiased), var(x, unbiased)."""
    if isinstance(dim, bool):  # var(x, unbiased)
        if unbiased is not None:
            raise TypeError("var: unbiased given twice")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError("correction: cannot be combined with unbiased")
    if correction is None:
        correction = 1.0 if unbiased is None or unbiased else 0.0
    return _dim_list(dim), float(correction)


def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var: M2 / (n - correction); n - correction <= 0 gives inf or NaN."""
    dims, c = _correction(dim, unbiased, correction)
    return _var(x, dims, c, keepdim)


def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std."""
    dims, c = _correction(dim, unbiased, correction)
    return _std(x, dims, c, keepdim)


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var_mean: (var, mean) from one pass."""
    dims, c = _correction(dim, unbiased, correction)
    return _var_mean(x, dims, c, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std_mean: (std, mean) from one pass."""
    dims, c = _correction(dim, unbiased, correction)
    return _std_mean(x, dims, c, keepdim)


__all__ = ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std", "var_mean",
           "std_mean"]
