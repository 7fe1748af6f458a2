# SPDX-License-Identifier: Apache-2.0
"""The norm family: layer_norm and rms_norm (plain and with a fused residual add), fake kernels,
autograd.

    reducekit.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)   torch's
    reducekit.rms_norm(input, normalized_shape, weight=None, eps=None, bias=None)      torch's, + bias
    y, s = reducekit.add_layer_norm(input, residual, normalized_shape, weight, bias, eps)
    y, s = reducekit.add_rms_norm(input, residual, normalized_shape, weight, eps, bias)
        s = input + residual (in input's dtype), y = norm(s): one read of input and residual, one
        write of y, s.

Keyword-only options of all four:
    out_dtype=None          y's dtype (None: input's). y is the float32 (float64) result rounded
                            once to it: bfloat16 input with out_dtype=torch.float32 gives y
                            unrounded to bfloat16.
    residual_in_float32     (add_* only) the residual stream in float32: s = input + residual
                            computed and returned in float32 (float64 if either is), never
                            rounded to input's dtype, and y = norm(s); eps=None is then float32's.
Both run today as the float32 (float64) kernels over converted tensors, with the exact results a
fused kernel would give and up to twice its memory traffic.

rms_norm's bias (torch's rms_norm has none) is optional and last, so torch's positional calls
keep their meaning: y = rms_norm(input) * weight + bias, the bias added in the same kernel and the
result rounded once.

weight and bias may be float32 with bfloat16/float16 input (mixed-precision training). The kernels
are torch.ops.reducekit.* (python/csrc/norm_ops.cpp); their forward ops also return the per-row
statistics (mean, rstd) that the backward ops take, and their autograd lives in C++
(python/csrc/norm_autograd.cpp). dweight/dbias are deterministic.
"""
import torch

from ._checks import check_dtype
from ._entry import compiling, eager

_ops = torch.ops.reducekit
_HALF = (torch.float16, torch.bfloat16)
_FLOATS = (torch.float32, torch.float64, *_HALF)


def _shape(normalized_shape):
    if isinstance(normalized_shape, int):
        return [normalized_shape]
    if isinstance(normalized_shape, (list, tuple)):  # torch.Size too; the op's schema checks the items
        return normalized_shape
    return [int(s) for s in normalized_shape]


_DTYPE_EPS = {t: torch.finfo(t).eps for t in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}


def _rms_eps(input, eps):
    """torch.nn.functional.rms_norm's eps=None: the epsilon of input's dtype (looked up in a table:
    torch.finfo costs host time on every call)."""
    if eps is not None:
        return float(eps)
    found = _DTYPE_EPS.get(input.dtype)
    return found if found is not None else 0.0  # not a float dtype: the op's check names input


# ----------------------------------------------------------------------------- fake kernels

def _stat(x, normalized_shape):
    """The per-row statistic of the fake kernels, after the check the CUDA ops make: normalized_shape
    names 1 .. rank(x) trailing dims of x (the op's input) exactly. The message is the core's,
    which names the C++ API's argument x, so eager and compiled calls fail alike."""
    shape = list(normalized_shape)
    if not 1 <= len(shape) <= x.dim() or list(x.shape[x.dim() - len(shape):]) != shape:
        raise RuntimeError(f"normalized_shape: {shape} does not match the trailing dims of x, whose shape is "
                           f"{list(x.shape)}")
    lead = max(0, x.dim() - len(normalized_shape))
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.new_empty(x.shape[:lead], dtype=dtype)


@torch.library.register_fake("reducekit::layer_norm")
def _layer_norm_fake(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return torch.empty_like(input, memory_format=torch.contiguous_format), _stat(input, normalized_shape), \
        _stat(input, normalized_shape)


@torch.library.register_fake("reducekit::rms_norm")
def _rms_norm_fake(input, normalized_shape, weight=None, eps=1e-6, bias=None):
    return torch.empty_like(input, memory_format=torch.contiguous_format), _stat(input, normalized_shape)


@torch.library.register_fake("reducekit::add_layer_norm")
def _add_layer_norm_fake(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    like = torch.empty_like(input, memory_format=torch.contiguous_format)
    return like, torch.empty_like(like), _stat(input, normalized_shape), _stat(input, normalized_shape)


@torch.library.register_fake("reducekit::add_rms_norm")
def _add_rms_norm_fake(input, residual, normalized_shape, weight=None, eps=1e-6, bias=None):
    like = torch.empty_like(input, memory_format=torch.contiguous_format)
    return like, torch.empty_like(like), _stat(input, normalized_shape)


def _param_grad(x, normalized_shape, wanted, dtype):
    return x.new_empty(normalized_shape if wanted else [0], dtype=dtype)


@torch.library.register_fake("reducekit::layer_norm_backward")
def _layer_norm_backward_fake(dy, x, normalized_shape, mean, rstd, weight, param_grads, param_dtype):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            _param_grad(x, normalized_shape, param_grads, param_dtype),
            _param_grad(x, normalized_shape, param_grads, param_dtype))


@torch.library.register_fake("reducekit::rms_norm_backward")
def _rms_norm_backward_fake(dy, x, normalized_shape, rstd, weight, param_grads, param_dtype, bias_grad=False):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            _param_grad(x, normalized_shape, param_grads, param_dtype),
            _param_grad(x, normalized_shape, bias_grad, param_dtype))


# Autograd: registered in C++ (python/csrc/norm_autograd.cpp).


# ----------------------------------------------------------------------------- output dtype, float32 residual

def _converted(input, out_dtype, extra=()):
    """The dtype a call whose y is not in input's dtype computes in (float64 where input, y or an
    `extra` dtype is, else float32), after checking out_dtype; None where the plain call serves."""
    check_dtype(out_dtype, "the norms write", "out_dtype")
    plain = (out_dtype is None or out_dtype == input.dtype) and not extra
    if plain or input.dtype not in _FLOATS:  # not a float input: the plain call's check names it
        return None
    return torch.float64 if torch.float64 in (input.dtype, out_dtype, *extra) else torch.float32


def _param_as(t, input, name, math):
    """weight / bias checked by the op's own rule against the caller's input (input's dtype, or
    float32 with 16-bit input), then widened to `math`, the dtype the converted input has."""
    if t is None:
        return None
    if t.dtype != input.dtype and not (input.dtype in _HALF and t.dtype == torch.float32):
        raise RuntimeError(f"{name}: dtype {_dtype_name(t.dtype)} must be input's ({_dtype_name(input.dtype)})"
                           + (" or float32" if input.dtype in _HALF else ""))
    return t.to(math)


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def _computed_in(math, kind, x, like, normalized_shape, weight, bias, eps):
    """kind's y of x converted to `math`, in float32 or float64 (rms_norm's eps resolved); weight
    and bias checked against `like`, the caller's input, and widened to `math`."""
    w, b = _param_as(weight, like, "weight", math), _param_as(bias, like, "bias", math)
    if kind == "layer_norm":
        return _ops.layer_norm(x.to(math), _shape(normalized_shape), w, b, float(eps))[0]
    return _ops.rms_norm(x.to(math), _shape(normalized_shape), w, eps, b)[0]


def _rounded(y, input, out_dtype):
    return y.to(input.dtype if out_dtype is None else out_dtype)


# ----------------------------------------------------------------------------- functional API

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, *, out_dtype=None):
    """torch.nn.functional.layer_norm over the trailing dims normalized_shape names; out_dtype:
    y's dtype (None: input's)."""
    math = _converted(input, out_dtype)
    if math is None:
        shape, eps = _shape(normalized_shape), float(eps)
        if eager is not None and not compiling():
            y = eager.layer_norm(input, shape, weight, bias, eps)
            if y is not NotImplemented:
                return y
        return _ops.layer_norm(input, shape, weight, bias, eps)[0]
    return _rounded(_computed_in(math, "layer_norm", input, input, normalized_shape, weight, bias, eps), input,
                    out_dtype)


def rms_norm(input, normalized_shape, weight=None, eps=None, bias=None, *, out_dtype=None):
    """torch.nn.functional.rms_norm; eps=None is torch.finfo(input.dtype).eps, as torch. bias (not
    in torch's) is added after the weight, fused: rms_norm(input) * weight + bias. out_dtype: y's
    dtype (None: input's)."""
    math = _converted(input, out_dtype)
    if math is None:
        shape, eps = _shape(normalized_shape), _rms_eps(input, eps)
        if eager is not None and not compiling():
            y = eager.rms_norm(input, shape, weight, eps, bias)
            if y is not NotImplemented:
                return y
        return _ops.rms_norm(input, shape, weight, eps, bias)[0]
    return _rounded(_computed_in(math, "rms_norm", input, input, normalized_shape, weight, bias,
                                 _rms_eps(input, eps)), input, out_dtype)


def _float32_sum(input, residual):
    """s = input + residual in float32 (float64 where either is), neither rounded to a 16-bit
    dtype first: one operand in that dtype makes torch's promotion add there, in one kernel."""
    for t, name in ((input, "input"), (residual, "residual")):
        if t.dtype not in _FLOATS:
            raise RuntimeError(f"{name}: dtype {_dtype_name(t.dtype)} is not a float dtype")
    if residual.shape != input.shape or residual.device != input.device:
        raise RuntimeError(f"residual: {list(residual.shape)} on {residual.device} must match input's "
                           f"{list(input.shape)} on {input.device}")
    wide = torch.float64 if torch.float64 in (input.dtype, residual.dtype) else torch.float32
    if input.dtype != wide and residual.dtype != wide:
        residual = residual.to(wide)
    return input + residual


def _stays_in_input_dtype(input, residual, residual_in_float32):
    """Whether s is input + residual in input's dtype: always without residual_in_float32, and
    with it where both are already float32 (or both float64)."""
    return not residual_in_float32 or (input.dtype not in _HALF and residual.dtype == input.dtype)


def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5, *,
                   residual_in_float32=False, out_dtype=None):
    """(layer_norm(s), s) with s = input + residual, fused; residual_in_float32, out_dtype: as the
    module docstring says."""
    if _stays_in_input_dtype(input, residual, residual_in_float32):
        converted = _converted(input, out_dtype) is not None
        y, s, _, _ = _ops.add_layer_norm(input, residual, _shape(normalized_shape), weight, bias, float(eps))
        return (layer_norm(s, normalized_shape, weight, bias, eps, out_dtype=out_dtype) if converted else y), s
    s = _float32_sum(input, residual)
    y = _computed_in(_converted(input, out_dtype, (s.dtype,)), "layer_norm", s, input, normalized_shape, weight, bias,
                     eps)
    return _rounded(y, input, out_dtype), s


def add_rms_norm(input, residual, normalized_shape, weight=None, eps=None, bias=None, *,
                 residual_in_float32=False, out_dtype=None):
    """(rms_norm(s, ..., bias=bias), s) with s = input + residual, fused; residual_in_float32,
    out_dtype: as the module docstring says (eps=None: the epsilon of s's dtype)."""
    if _stays_in_input_dtype(input, residual, residual_in_float32):
        converted = _converted(input, out_dtype) is not None
        y, s, _ = _ops.add_rms_norm(input, residual, _shape(normalized_shape), weight, _rms_eps(input, eps), bias)
        return (rms_norm(s, normalized_shape, weight, eps, bias, out_dtype=out_dtype) if converted else y), s
    s = _float32_sum(input, residual)
    y = _computed_in(_converted(input, out_dtype, (s.dtype,)), "rms_norm", s, input, normalized_shape, weight, bias,
                     _rms_eps(s, eps))
    return _rounded(y, input, out_dtype), s


__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
