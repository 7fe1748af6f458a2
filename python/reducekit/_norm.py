"""The norm family: layer_norm and rms_norm (plain and with a fused residual add), fake kernels,
autograd.

    reducekit.layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5)   torch's
    reducekit.rms_norm(x, normalized_shape, weight=None, eps=None)                 torch's
    y, s = reducekit.add_layer_norm(x, residual, normalized_shape, weight, bias, eps)
    y, s = reducekit.add_rms_norm(x, residual, normalized_shape, weight, eps)
        s = x + residual (in x's dtype), y = norm(s): one read of x and residual, one write of y, s.

weight and bias may be float32 with bfloat16/float16 x (mixed-precision training). The kernels
are torch.ops.reducekit.* (python/csrc/norm_ops.cpp); their forward ops also return the per-row
statistics (mean, rstd) that the backward ops take. dweight/dbias are deterministic.
"""
import torch

from ._dispatch import eager

_ops = torch.ops.reducekit

_layer_norm = eager(_ops.layer_norm)
_rms_norm = eager(_ops.rms_norm)
_add_layer_norm = eager(_ops.add_layer_norm)
_add_rms_norm = eager(_ops.add_rms_norm)


def _shape(normalized_shape):
    if isinstance(normalized_shape, int):
        return [normalized_shape]
    return [int(s) for s in normalized_shape]


def _rms_eps(x, eps):
    """torch.nn.functional.rms_norm's eps=None: the epsilon of x's dtype."""
    return torch.finfo(x.dtype).eps if eps is None else float(eps)


# ----------------------------------------------------------------------------- fake kernels

def _stat(x, normalized_shape):
    lead = max(0, x.dim() - len(normalized_shape))
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.new_empty(x.shape[:lead], dtype=dtype)


@torch.library.register_fake("reducekit::layer_norm")
def _layer_norm_fake(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    return torch.empty_like(x, memory_format=torch.contiguous_format), _stat(x, normalized_shape), \
        _stat(x, normalized_shape)


@torch.library.register_fake("reducekit::rms_norm")
def _rms_norm_fake(x, normalized_shape, weight=None, eps=1e-6):
    return torch.empty_like(x, memory_format=torch.contiguous_format), _stat(x, normalized_shape)


@torch.library.register_fake("reducekit::add_layer_norm")
def _add_layer_norm_fake(x, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    like = torch.empty_like(x, memory_format=torch.contiguous_format)
    return like, torch.empty_like(like), _stat(x, normalized_shape), _stat(x, normalized_shape)


@torch.library.register_fake("reducekit::add_rms_norm")
def _add_rms_norm_fake(x, residual, normalized_shape, weight=None, eps=1e-6):
    like = torch.empty_like(x, memory_format=torch.contiguous_format)
    return like, torch.empty_like(like), _stat(x, normalized_shape)


def _param_grad(x, normalized_shape, wanted, dtype):
    return x.new_empty(normalized_shape if wanted else [0], dtype=dtype)


@torch.library.register_fake("reducekit::layer_norm_backward")
def _layer_norm_backward_fake(dy, x, normalized_shape, mean, rstd, weight, param_grads, param_dtype):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            _param_grad(x, normalized_shape, param_grads, param_dtype),
            _param_grad(x, normalized_shape, param_grads, param_dtype))


@torch.library.register_fake("reducekit::rms_norm_backward")
def _rms_norm_backward_fake(dy, x, normalized_shape, rstd, weight, param_grads, param_dtype):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            _param_grad(x, normalized_shape, param_grads, param_dtype))


# ----------------------------------------------------------------------------- autograd

def _param_dtype(x, weight, bias=None):
    if weight is not None:
        return weight.dtype
    if bias is not None:
        return bias.dtype
    return x.dtype


def _mark_stats(ctx, *stats):
    mark = getattr(ctx, "mark_non_differentiable", None)
    if mark is not None:
        mark(*stats)


def _setup_layer_norm(ctx, inputs, output):
    x, normalized_shape, weight, bias = inputs[0], inputs[1], inputs[2], inputs[3]
    _, mean, rstd = output
    _mark_stats(ctx, mean, rstd)
    ctx.normalized_shape = list(normalized_shape)
    ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
    ctx.param_dtype = _param_dtype(x, weight, bias)
    ctx.save_for_backward(x, mean, rstd, weight)


def _layer_norm_grads(ctx, dy, x, mean, rstd, weight, weight_index):
    """(dx, dweight, dbias) of a layer_norm whose weight and bias are inputs weight_index and weight_index + 1."""
    if dy is None:  # only other outputs were used
        dy = torch.zeros_like(x)
    wants_params = (ctx.has_weight and ctx.needs_input_grad[weight_index]) or \
        (ctx.has_bias and ctx.needs_input_grad[weight_index + 1])
    dx, dweight, dbias = _ops.layer_norm_backward(dy.contiguous(), x, ctx.normalized_shape, mean, rstd, weight,
                                                  bool(wants_params), ctx.param_dtype)
    return dx, (dweight if ctx.has_weight and wants_params else None), (dbias if ctx.has_bias and wants_params else None)


def _layer_norm_backward(ctx, dy, _dmean, _drstd):
    x, mean, rstd, weight = ctx.saved_tensors
    dx, dweight, dbias = _layer_norm_grads(ctx, dy, x, mean, rstd, weight, 2)
    return dx, None, dweight, dbias, None


torch.library.register_autograd("reducekit::layer_norm", _layer_norm_backward, setup_context=_setup_layer_norm)


def _setup_rms_norm(ctx, inputs, output):
    x, normalized_shape, weight = inputs[0], inputs[1], inputs[2]
    _, rstd = output
    _mark_stats(ctx, rstd)
    ctx.normalized_shape = list(normalized_shape)
    ctx.has_weight = weight is not None
    ctx.param_dtype = _param_dtype(x, weight)
    ctx.save_for_backward(x, rstd, weight)


def _rms_norm_grads(ctx, dy, x, rstd, weight, weight_index):
    if dy is None:
        dy = torch.zeros_like(x)
    wants = ctx.has_weight and ctx.needs_input_grad[weight_index]
    dx, dweight = _ops.rms_norm_backward(dy.contiguous(), x, ctx.normalized_shape, rstd, weight, bool(wants),
                                         ctx.param_dtype)
    return dx, (dweight if wants else None)


def _rms_norm_backward(ctx, dy, _drstd):
    x, rstd, weight = ctx.saved_tensors
    dx, dweight = _rms_norm_grads(ctx, dy, x, rstd, weight, 2)
    return dx, None, dweight, None


torch.library.register_autograd("reducekit::rms_norm", _rms_norm_backward, setup_context=_setup_rms_norm)


# The fused residual ops: y = norm(s), s = x + residual, so d(x) = d(residual) = ds + norm'(dy).
# Backward reads the saved s (an output), not x and residual.

def _setup_add_layer_norm(ctx, inputs, output):
    x, normalized_shape, weight, bias = inputs[0], inputs[2], inputs[3], inputs[4]
    _, s, mean, rstd = output
    _mark_stats(ctx, mean, rstd)
    ctx.normalized_shape = list(normalized_shape)
    ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
    ctx.param_dtype = _param_dtype(x, weight, bias)
    ctx.save_for_backward(s, mean, rstd, weight)


def _add_layer_norm_backward(ctx, dy, ds, _dmean, _drstd):
    s, mean, rstd, weight = ctx.saved_tensors
    dx, dweight, dbias = _layer_norm_grads(ctx, dy, s, mean, rstd, weight, 3)
    if ds is not None:
        dx = dx + ds
    return dx, dx, None, dweight, dbias, None


torch.library.register_autograd("reducekit::add_layer_norm", _add_layer_norm_backward,
                                setup_context=_setup_add_layer_norm)


def _setup_add_rms_norm(ctx, inputs, output):
    x, normalized_shape, weight = inputs[0], inputs[2], inputs[3]
    _, s, rstd = output
    _mark_stats(ctx, rstd)
    ctx.normalized_shape = list(normalized_shape)
    ctx.has_weight = weight is not None
    ctx.param_dtype = _param_dtype(x, weight)
    ctx.save_for_backward(s, rstd, weight)


def _add_rms_norm_backward(ctx, dy, ds, _drstd):
    s, rstd, weight = ctx.saved_tensors
    dx, dweight = _rms_norm_grads(ctx, dy, s, rstd, weight, 3)
    if ds is not None:
        dx = dx + ds
    return dx, dx, None, dweight, None


torch.library.register_autograd("reducekit::add_rms_norm", _add_rms_norm_backward, setup_context=_setup_add_rms_norm)


# ----------------------------------------------------------------------------- functional API

def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing dims normalized_shape names."""
    return _layer_norm(x, _shape(normalized_shape), weight, bias, float(eps))[0]


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm; eps=None is torch.finfo(x.dtype).eps, as torch."""
    return _rms_norm(x, _shape(normalized_shape), weight, _rms_eps(x, eps))[0]


def add_layer_norm(x, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(layer_norm(s), s) with s = x + residual, fused."""
    y, s, _, _ = _add_layer_norm(x, residual, _shape(normalized_shape), weight, bias, float(eps))
    return y, s


def add_rms_norm(x, residual, normalized_shape, weight=None, eps=None):
    """(rms_norm(s), s) with s = x + residual, fused."""
    y, s, _ = _add_rms_norm(x, residual, _shape(normalized_shape), weight, _rms_eps(x, eps))
    return y, s


__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
