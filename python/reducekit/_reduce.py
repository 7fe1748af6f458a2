# SPDX-License-Identifier: Apache-2.0
"""The reduction family: functional API mirroring torch's signatures, fake kernels.

    reducekit.sum(input, dim=None, keepdim=False, *, dtype=None)      torch.sum
    reducekit.mean / prod                                              torch.mean / torch.prod
    reducekit.amax(input, dim=(), keepdim=False) / amin                torch.amax / torch.amin
    reducekit.argmax(input, dim=None, keepdim=False) / argmin          torch.argmax / torch.argmin
    reducekit.logsumexp(input, dim, keepdim=False)                     torch.logsumexp
    reducekit.var(input, dim=None, unbiased=None, keepdim=False, *, correction=None)   and std,
    var_mean, std_mean                                                 torch.var & co.

dim may be an int, a list/tuple of ints, or None (every dim; so is an empty list, as in torch).
The kernels are torch.ops.reducekit.* (python/csrc/reduce_ops.cpp), called as they are: their
autograd is C++ (python/csrc/reduce_autograd.cpp), as softmax's and the norms' are.
"""
import torch

from ._checks import check_dtype, wrap_dim
from ._entry import compiling, eager

_ops = torch.ops.reducekit


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
    """The fake kernel of op (input, dim, keepdim[, dtype]): sum, mean, prod, the extrema, logsumexp."""
    index_dtype = torch.int64 if op in ("argmax", "argmin") else None

    def fake(input, dim=None, keepdim=False, *, dtype=None):
        if op in _EXTREMA:
            _check_nonempty_set(op, input, dim)
        shape = _out_shape(input, dim, keepdim)
        check_dtype(dtype, f"{op} returns")  # only sum and mean take a dtype
        return input.new_empty(shape, dtype=index_dtype or dtype or input.dtype)
    return fake


def _fake_moments(input, dim=None, correction=1.0, keepdim=False):
    return input.new_empty(_out_shape(input, dim, keepdim))


def _fake_moments_pair(input, dim=None, correction=1.0, keepdim=False):
    shape = _out_shape(input, dim, keepdim)
    return input.new_empty(shape), input.new_empty(shape)


for _name in ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp"):
    torch.library.register_fake(f"reducekit::{_name}")(_fake_reduce(_name))
for _name in ("var", "std"):
    torch.library.register_fake(f"reducekit::{_name}")(_fake_moments)
for _name in ("var_mean", "std_mean"):
    torch.library.register_fake(f"reducekit::{_name}")(_fake_moments_pair)


# ----------------------------------------------------------------------------- functional API

def _call(name, input, *args):
    """torch.ops.reducekit.<name>(input, *args), through its eager entry where that takes the call
    (python/reducekit/_entry.py)."""
    if eager is not None and not compiling():
        y = getattr(eager, name)(input, *args)
        if y is not NotImplemented:
            return y
    return getattr(_ops, name)(input, *args)


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001 (mirrors torch.sum)
    """torch.sum: float32 accumulation (float64 when input or dtype is float64), deterministic."""
    if dtype is None:  # no keyword to pass: a little less host time
        return _call("sum", input, _dim_list(dim), keepdim)
    return _ops.sum(input, _dim_list(dim), keepdim, dtype=dtype)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """torch.mean; the mean of an empty set is NaN."""
    if dtype is None:
        return _call("mean", input, _dim_list(dim), keepdim)
    return _ops.mean(input, _dim_list(dim), keepdim, dtype=dtype)


def prod(input, dim=None, keepdim=False, *, dtype=None):
    """torch.prod (any dims, not only one); dtype casts input first, as torch does."""
    check_dtype(dtype, "prod computes in")  # before the cast, which would make input the culprit
    if dtype is not None:
        input = input.to(dtype)
    return _call("prod", input, _dim_list(dim), keepdim)


def amax(input, dim=(), keepdim=False):
    """torch.amax: NaN propagates; an empty set raises torch's error (IndexError naming the dim)."""
    return _call("amax", input, _dim_list(dim), keepdim)


def amin(input, dim=(), keepdim=False):
    """torch.amin."""
    return _call("amin", input, _dim_list(dim), keepdim)


def argmax(input, dim=None, keepdim=False):
    """torch.argmax: the first NaN, else the first maximum; dim=None indexes input flattened."""
    return _call("argmax", input, dim, keepdim)


def argmin(input, dim=None, keepdim=False):
    """torch.argmin."""
    return _call("argmin", input, dim, keepdim)


def logsumexp(input, dim, keepdim=False):
    """torch.logsumexp: all -inf gives -inf, any +inf gives +inf."""
    return _call("logsumexp", input, _dim_list(dim), keepdim)


def _correction(dim, unbiased, correction):
    """torch.var's argument forms: var(input, dim, *, correction), var(input, dim, unbiased),
    var(input, unbiased)."""
    if isinstance(dim, bool):  # var(input, unbiased)
        if unbiased is not None:
            raise TypeError("var: unbiased given twice")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError("correction: cannot be combined with unbiased")
    if correction is None:
        correction = 1.0 if unbiased is None or unbiased else 0.0
    return _dim_list(dim), float(correction)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var: M2 / (n - correction); n - correction <= 0 gives inf or NaN."""
    dims, c = _correction(dim, unbiased, correction)
    return _call("var", input, dims, c, keepdim)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std."""
    dims, c = _correction(dim, unbiased, correction)
    return _call("std", input, dims, c, keepdim)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var_mean: (var, mean) from one pass."""
    dims, c = _correction(dim, unbiased, correction)
    return _call("var_mean", input, dims, c, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std_mean: (std, mean) from one pass."""
    dims, c = _correction(dim, unbiased, correction)
    return _call("std_mean", input, dims, c, keepdim)


__all__ = ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std", "var_mean",
           "std_mean"]
