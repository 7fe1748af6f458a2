# SPDX-License-Identifier: Apache-2.0
"""Cross-entropy: torch.nn.functional.cross_entropy's signature with class-index targets, plus a
z-loss (lse_square_scale) and logit soft-capping (softcap), on reducekit's kernels.

    loss = reducekit.cross_entropy(logits, target, weight=None, ignore_index=-100,
                                   reduction="mean", label_smoothing=0.0,
                                   lse_square_scale=0.0, softcap=0.0)

The kernels (torch.ops.reducekit.cross_entropy_forward / _backward, python/csrc/loss_ops.cpp)
give each row's loss and logsumexp in float32 (float64 for float64 logits); 'sum' and 'mean'
add the rows with reducekit.sum (a fixed-order sum: deterministic, no atomics), 'mean' over
the kept rows' class weights as torch. A target outside [0, classes) that is not ignore_index
makes its row's loss NaN (torch raises a device-side assert instead, which kills the context).
"""
import torch

from ._reduce import sum as _sum

_ops = torch.ops.reducekit


def _row_values_dtype(logits):
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


@torch.library.register_fake("reducekit::cross_entropy_forward")
def _forward_fake(logits, target, weight=None, ignore_index=-100, label_smoothing=0.0, lse_square_scale=0.0,
                  softcap=0.0):
    rows = logits.shape[:-1]
    dtype = _row_values_dtype(logits)
    return logits.new_empty(rows, dtype=dtype), logits.new_empty(rows, dtype=dtype)


@torch.library.register_fake("reducekit::cross_entropy_backward")
def _backward_fake(logits, target, weight, lse, grad_loss, ignore_index, label_smoothing, lse_square_scale,
                   softcap):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output):
    logits, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap = inputs
    ctx.save_for_backward(logits, target, weight, output[1])
    ctx.options = (ignore_index, label_smoothing, lse_square_scale, softcap)
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, grad_loss, grad_lse):
    logits, target, weight, lse = ctx.saved_tensors
    dlogits = _ops.cross_entropy_backward(logits, target, weight, lse, grad_loss.contiguous(), *ctx.options)
    return dlogits, None, None, None, None, None, None


torch.library.register_autograd("reducekit::cross_entropy_forward", _backward, setup_context=_setup)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                  lse_square_scale=0.0, softcap=0.0):
    """torch.nn.functional.cross_entropy with class-index targets (no probability targets yet)."""
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction: expected 'none', 'sum' or 'mean', got {reduction!r}")
    if target.is_floating_point():
        raise NotImplementedError("target: class-probability targets are not supported yet; pass class indices")
    if input.dim() == 1:  # one unbatched row
        logits, rows = input.unsqueeze(0), target.reshape(1)
    elif input.dim() == 2:
        logits, rows = input, target
    else:  # [N, C, d1, ...]: classes last, a row per position (a copy)
        logits, rows = input.movedim(1, -1).reshape(-1, input.shape[1]), target.reshape(-1)
    values = _row_values_dtype(input)
    w = None if weight is None else weight.to(values)
    loss, _ = _ops.cross_entropy_forward(logits, rows, w, int(ignore_index), float(label_smoothing),
                                         float(lse_square_scale), float(softcap))
    if reduction == "none":
        return loss.reshape(target.shape).to(input.dtype)
    total = _sum(loss)
    if reduction == "sum":
        return total.to(input.dtype)
    kept = (rows != ignore_index).to(values)
    if w is not None:
        kept = kept * w[rows.clamp(0, w.numel() - 1)]
    return (total / _sum(kept)).to(input.dtype)


__all__ = ["cross_entropy"]
