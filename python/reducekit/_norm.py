# SPDX-License-Identifier: Apache-2.0
"""The norm family: layer_norm and rms_norm (plain and with a fused residual add), fake kernels,
autograd.

    reducekit.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)   torch's
    reducekit.rms_norm(input, normalized_shape, weight=None, eps=None, bias=None)      torch's, + bias
    y, s = reducekit.add_layer_norm(input, residual, normalized_shape, weight, bias, eps)
    y, s = reducekit.add_rms_norm(input, residual, normalized_shape, weight, eps, bias)
        s = input + residual (in input's dtype), y = norm(s): one read of input and residual, one
        write of y, s.

rms_norm's bias (torch's rms_norm has none) is optional and last, so torch's positional calls
keep their meaning: y = rms_norm(input) * weight + bias, the bias added in the same kernel and the
result rounded once.

weight and bias may be float32 with bfloat16/float16 input (mixed-precision training). The kernels
are torch.ops.reducekit.* (python/csrc/norm_ops.cpp); their forward ops also return the per-row
statistics (mean, rstd) that the backward ops take, and their autograd lives in C++
(python/csrc/norm_autograd.cpp). dweight/dbias are deterministic.
"""
import torch

_ops = torch.ops.reducekit


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
    return found if found is not None else torch.finfo(input.dtype).eps


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


# ----------------------------------------------------------------------------- functional API

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing dims normalized_shape names."""
    return _ops.layer_norm(input, _shape(normalized_shape), weight, bias, float(eps))[0]


def rms_norm(input, normalized_shape, weight=None, eps=None, bias=None):
    """torch.nn.functional.rms_norm; eps=None is torch.finfo(input.dtype).eps, as torch. bias (not
    in torch's) is added after the weight, fused: rms_norm(input) * weight + bias."""
    return _ops.rms_norm(input, _shape(normalized_shape), weight, _rms_eps(input, eps), bias)[0]


def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(layer_norm(s), s) with s = input + residual, fused."""
    y, s, _, _ = _ops.add_layer_norm(input, residual, _shape(normalized_shape), weight, bias, float(eps))
    return y, s


def add_rms_norm(input, residual, normalized_shape, weight=None, eps=None, bias=None):
    """(rms_norm(s, ..., bias=bias), s) with s = input + residual, fused."""
    y, s, _ = _ops.add_rms_norm(input, residual, _shape(normalized_shape), weight, _rms_eps(input, eps), bias)
    return y, s


__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
