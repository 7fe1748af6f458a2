# TEMPORARY test stub (helper's device check only; deleted afterwards): reducekit's API on torch ops.
import torch
from torch.library import custom_op
from . import nn  # noqa

def _check(x, dim, name="x"):
    if not x.is_cuda:
        raise RuntimeError(f"reducekit: {name} must be a CUDA tensor")
    if not x.is_floating_point():
        raise RuntimeError(f"reducekit: {name} must be floating point")
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"reducekit: dim {dim} out of range")

@custom_op("reducekit::softmax", mutates_args=())
def _softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    _check(x, dim)
    return torch.softmax(x.contiguous(), dim)

@custom_op("reducekit::log_softmax", mutates_args=())
def _log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    _check(x, dim)
    return torch.log_softmax(x.contiguous(), dim)

@custom_op("reducekit::softmax_backward", mutates_args=())
def _softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    _check(y, dim, "y"); _check(dy, dim, "dy")
    if y.shape != dy.shape or y.dtype != dy.dtype:
        raise RuntimeError("dy must match y")
    return torch._softmax_backward_data(dy.contiguous(), y.contiguous(), dim, y.dtype)

@custom_op("reducekit::log_softmax_backward", mutates_args=())
def _log_softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    _check(y, dim, "y"); _check(dy, dim, "dy")
    if y.shape != dy.shape or y.dtype != dy.dtype:
        raise RuntimeError("dy must match y")
    return torch._log_softmax_backward_data(dy.contiguous(), y.contiguous(), dim, y.dtype)

for _op in (_softmax, _log_softmax):
    _op.register_fake(lambda x, dim: x.new_empty(x.shape))
for _op in (_softmax_backward, _log_softmax_backward):
    _op.register_fake(lambda y, dy, dim: y.new_empty(y.shape))

def _setup(ctx, inputs, output):
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)

def _bw_softmax(ctx, g):
    (y,) = ctx.saved_tensors
    return torch.ops.reducekit.softmax_backward(y, g, ctx.dim), None

def _bw_log_softmax(ctx, g):
    (y,) = ctx.saved_tensors
    return torch.ops.reducekit.log_softmax_backward(y, g, ctx.dim), None

_softmax.register_autograd(_bw_softmax, setup_context=_setup)
_log_softmax.register_autograd(_bw_log_softmax, setup_context=_setup)

def softmax(x, dim=-1):
    return torch.ops.reducekit.softmax(x, dim)

def log_softmax(x, dim=-1):
    return torch.ops.reducekit.log_softmax(x, dim)
