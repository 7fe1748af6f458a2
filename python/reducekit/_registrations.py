"""Fake (meta) kernels and autograd formulas for torch.ops.reducekit.*.

Fake kernels let torch.compile trace the ops without running them: every op returns a fresh
contiguous tensor of its first input's shape and dtype, exactly as the CUDA kernels do.
"""
import torch

_ops = torch.ops.reducekit


def _like_first(first, *rest):
    return torch.empty(first.shape, dtype=first.dtype, device=first.device)


for _name in ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward"):
    torch.library.register_fake(f"reducekit::{_name}")(_like_first)


def _save_output(ctx, inputs, output):
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _softmax_grad(ctx, grad):
    (y,) = ctx.saved_tensors
    return _ops.softmax_backward(y, grad, ctx.dim), None


def _log_softmax_grad(ctx, grad):
    (y,) = ctx.saved_tensors
    return _ops.log_softmax_backward(y, grad, ctx.dim), None


torch.library.register_autograd("reducekit::softmax", _softmax_grad, setup_context=_save_output)
torch.library.register_autograd("reducekit::log_softmax", _log_softmax_grad, setup_context=_save_output)
