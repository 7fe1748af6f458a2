# SPDX-License-Identifier: Apache-2.0
"""A model's last layer and its loss without the logits: cross_entropy(hidden @ weight.T + bias,
target) and its gradients, the rows taken in chunks so that only one chunk's logits exist at a time.

    loss = reducekit.linear_cross_entropy(hidden, weight, target, bias=None, class_weight=None,
                                          ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                                          lse_square_scale=0.0, softcap=0.0, chunk_rows=None)

A chunk's logits come from torch.mm on the caller's stream (cuBLAS), cross_entropy_fused_ turns them
in place into the loss and dlogits, and two more GEMMs add the chunk's share of dhidden and dweight.
With 'mean' or 'sum' the gradients are computed in the forward (three GEMMs a chunk, as the unchunked
linear + loss needs) and scaled by the upstream gradient in backward; with 'none' the upstream
gradient of each row is only known in backward, which recomputes the logits (four GEMMs a chunk).
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._loss import _check_class_indices, _row_values_dtype
from ._reduce import sum as _sum

_ops = torch.ops.reducekit
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# A chunk's logits may take 1/8 of the full logits' bytes, and never need to be smaller than this.
_CHUNK_FLOOR_BYTES = 64 << 20


def plan_chunk_rows(rows: int, classes: int, element_size: int, chunk_rows: Optional[int] = None) -> int:
    """Rows per chunk: chunk_rows when given, else as many as keep a chunk's logits and the O(rows +
    classes) floats beside them within 1/8 of the full logits (at least 64 MiB of logits), the
    rows then spread evenly over the chunks that takes."""
    if chunk_rows is not None:
        return max(1, min(rows, chunk_rows))
    if rows == 0:
        return 1
    row_bytes = (classes + -classes % max(1, 16 // element_size)) * element_size  # as _padded_classes pads
    budget = max(rows * classes * element_size // 8 - 16 * rows - 8 * classes, _CHUNK_FLOOR_BYTES)
    most = max(1, budget // max(row_bytes, 1))
    chunks = math.ceil(rows / most)
    return math.ceil(rows / chunks)


def _padded_classes(weight: Tensor, bias: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
    """weight and bias with zero classes appended up to a multiple of 16 bytes of elements: cuBLAS
    runs GEMMs with a dimension such as 50257 several times slower (torch.compile pads likewise),
    so a chunk's GEMMs see the padded vocabulary.
    A padded class has logit 0 in every row, and its gradient is never read (the loss kernels see
    the real classes only; it meets zero rows of the weight in dhidden and lands in dweight's
    dropped rows). Costs a copy of the weight where the vocabulary is not aligned."""
    pad = -weight.shape[0] % max(1, 16 // weight.element_size())
    if pad == 0:
        return weight, bias
    weight = torch.cat([weight, weight.new_zeros(pad, weight.shape[1])])
    return weight, None if bias is None else torch.cat([bias, bias.new_zeros(pad)])


def _project(h: Tensor, weight: Tensor, bias: Optional[Tensor], out: Tensor) -> Tensor:
    if bias is None:
        return torch.mm(h, weight.t(), out=out)
    return torch.addmm(bias, h, weight.t(), out=out)


@torch.library.custom_op("reducekit::linear_cross_entropy_forward", mutates_args=())
def _forward_op(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, class_weight: Optional[Tensor],
                ignore_index: int, label_smoothing: float, lse_square_scale: float, softcap: float,
                chunk_rows: int) -> Tuple[Tensor, Tensor]:
    """Each row's loss and logsumexp (float32; float64 for float64), one chunk's logits at a time."""
    rows, classes = hidden.shape[0], weight.shape[0]
    values = _row_values_dtype(hidden)
    loss = hidden.new_empty(rows, dtype=values)
    lse = hidden.new_empty(rows, dtype=values)
    weight, bias = _padded_classes(weight, bias)
    buffer = hidden.new_empty((min(chunk_rows, rows), weight.shape[0]))
    for start in range(0, rows, chunk_rows):
        end = min(start + chunk_rows, rows)
        logits = _project(hidden[start:end], weight, bias, buffer[:end - start])[:, :classes]
        loss[start:end], lse[start:end] = _ops.cross_entropy_forward(
            logits, target[start:end], class_weight, ignore_index, label_smoothing, lse_square_scale, softcap)
    return loss, lse


@_forward_op.register_fake
def _forward_fake(hidden, weight, bias, target, class_weight, ignore_index, label_smoothing, lse_square_scale, softcap,
                  chunk_rows):
    values = _row_values_dtype(hidden)
    return hidden.new_empty(hidden.shape[0], dtype=values), hidden.new_empty(hidden.shape[0], dtype=values)


@torch.library.custom_op("reducekit::linear_cross_entropy_fused", mutates_args=())
def _fused_op(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, class_weight: Optional[Tensor],
              grad_loss: Tensor, ignore_index: int, label_smoothing: float, lse_square_scale: float, softcap: float,
              chunk_rows: int, hidden_grad: bool, weight_grad: bool,
              bias_grad: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(loss, lse, dhidden, dweight, dbias) for the upstream gradient grad_loss of each row's loss;
    a gradient not asked for is an empty tensor. dweight adds the chunks in order (deterministic
    where the GEMMs are); dbias adds them in float32 (float64) and is rounded once."""
    rows, classes = hidden.shape[0], weight.shape[0]
    values = _row_values_dtype(hidden)
    loss = hidden.new_empty(rows, dtype=values)
    lse = hidden.new_empty(rows, dtype=values)
    dhidden = torch.empty_like(hidden, memory_format=torch.contiguous_format) if hidden_grad else hidden.new_empty(0)
    weight, bias = _padded_classes(weight, bias)
    padded = weight.shape[0]
    dweight = weight.new_empty((padded, weight.shape[1])) if weight_grad else weight.new_empty(0)
    dbias = torch.zeros(padded, dtype=values, device=hidden.device) if bias_grad else weight.new_empty(0)
    if weight_grad and rows == 0:
        dweight.zero_()
    buffer = hidden.new_empty((min(chunk_rows, rows), padded))
    for start in range(0, rows, chunk_rows):
        end = min(start + chunk_rows, rows)
        h = hidden[start:end]
        dlogits = _project(h, weight, bias, buffer[:end - start])  # becomes the gradient in place
        loss[start:end], lse[start:end] = _ops.cross_entropy_fused_(
            dlogits[:, :classes], target[start:end], class_weight, grad_loss[start:end], ignore_index,
            label_smoothing, lse_square_scale, softcap)
        if hidden_grad:
            torch.mm(dlogits, weight, out=dhidden[start:end])
        if weight_grad:
            if start == 0:
                torch.mm(dlogits.t(), h, out=dweight)
            else:
                dweight.addmm_(dlogits.t(), h)
        if bias_grad:
            dbias += _sum(dlogits, 0, dtype=values)
    if weight_grad:
        dweight = dweight[:classes]  # the first rows: contiguous
    if bias_grad:
        dbias = dbias[:classes].to(weight.dtype)
    return loss, lse, dhidden, dweight, dbias


@_fused_op.register_fake
def _fused_fake(hidden, weight, bias, target, class_weight, grad_loss, ignore_index, label_smoothing, lse_square_scale,
                softcap, chunk_rows, hidden_grad, weight_grad, bias_grad):
    loss, lse = _forward_fake(hidden, weight, bias, target, class_weight, ignore_index, label_smoothing,
                              lse_square_scale, softcap, chunk_rows)
    dhidden = torch.empty_like(hidden, memory_format=torch.contiguous_format) if hidden_grad else hidden.new_empty(0)
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight_grad else weight.new_empty(0)
    dbias = weight.new_empty(weight.shape[0]) if bias_grad else weight.new_empty(0)
    return loss, lse, dhidden, dweight, dbias




class _ReducedLoss(torch.autograd.Function):
    """'mean' and 'sum': the gradients come with the loss (grad_loss holds each row's share of the
    reduced loss) and are scaled by the upstream gradient in backward."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, class_weight, grad_loss, divisor, options, chunk_rows):
        wanted = tuple(ctx.needs_input_grad[:3])
        loss, _, dhidden, dweight, dbias = _ops.linear_cross_entropy_fused(
            hidden, weight, bias, target, class_weight, grad_loss, *options, chunk_rows, *wanted)
        ctx.save_for_backward(dhidden, dweight, dbias)
        ctx.wanted = wanted
        ctx.used = False
        total = _sum(loss)
        return total if divisor is None else total / divisor

    @staticmethod
    def backward(ctx, grad):
        if torch.compiler.is_compiling():
            grads = [g * grad.to(g.dtype) if want else None for g, want in zip(ctx.saved_tensors, ctx.wanted)]
        else:
            # In place: the gradients are as large as the weight, and a scaled copy would double them
            # for a moment. So the saved gradients serve one backward only (checked before they are
            # unpacked, whose version check would give a less clear error).
            if ctx.used:
                raise RuntimeError("linear_cross_entropy: backward ran twice over one forward (retain_graph); "
                                   "its gradients are computed in the forward and scaled in place once")
            ctx.used = True
            grads = [g.mul_(grad.to(g.dtype)) if want else None for g, want in zip(ctx.saved_tensors, ctx.wanted)]
        return grads[0], grads[1], grads[2], None, None, None, None, None, None


class _RowLosses(torch.autograd.Function):
    """'none': each row's loss; backward recomputes the logits with the rows' upstream gradients."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, class_weight, options, chunk_rows):
        loss, _ = _ops.linear_cross_entropy_forward(hidden, weight, bias, target, class_weight, *options, chunk_rows)
        ctx.save_for_backward(hidden, weight, bias, target, class_weight)
        ctx.options, ctx.chunk_rows = options, chunk_rows
        return loss

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, bias, target, class_weight = ctx.saved_tensors
        wanted = ctx.needs_input_grad[:3]
        _, _, dhidden, dweight, dbias = _ops.linear_cross_entropy_fused(
            hidden, weight, bias, target, class_weight, grad.contiguous(), *ctx.options, ctx.chunk_rows, *wanted)
        grads = [g if want else None for g, want in zip((dhidden, dweight, dbias), wanted)]
        return grads[0], grads[1], grads[2], None, None, None, None


def _check(hidden, weight, target, bias, class_weight, reduction, chunk_rows):
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction: expected 'none', 'sum' or 'mean', got {reduction!r}")
    if hidden.dtype not in _FLOATS:
        raise ValueError(f"hidden: expected float32, float16, bfloat16 or float64, got {hidden.dtype}")
    if hidden.dim() < 1:
        raise ValueError("hidden: expected [..., H] features, got a 0-dim tensor")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight: expected [classes, {hidden.shape[-1]}] for hidden of shape {tuple(hidden.shape)}, "
                         f"got {tuple(weight.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("weight: expected at least one class, got 0 rows")
    if weight.dtype != hidden.dtype or weight.device != hidden.device:
        raise ValueError(f"weight: expected {hidden.dtype} on {hidden.device} as hidden, got {weight.dtype} on "
                         f"{weight.device}")
    if bias is not None and (bias.shape != weight.shape[:1] or bias.dtype != hidden.dtype
                             or bias.device != hidden.device):
        raise ValueError(f"bias: expected [{weight.shape[0]}] of {hidden.dtype} on {hidden.device}, got "
                         f"{tuple(bias.shape)} of {bias.dtype} on {bias.device}")
    if target.dtype != torch.int64:
        raise ValueError(f"target: expected int64 class indices, got {target.dtype}")
    if target.shape != hidden.shape[:-1]:
        raise ValueError(f"target: expected class indices of shape {list(hidden.shape[:-1])} for hidden of shape "
                         f"{list(hidden.shape)}, got {list(target.shape)}")
    if class_weight is not None and class_weight.shape != weight.shape[:1]:
        raise ValueError(f"class_weight: expected one value a class ({weight.shape[0]}), got shape "
                         f"{tuple(class_weight.shape)}")
    if chunk_rows is not None and (not isinstance(chunk_rows, int) or chunk_rows < 1):
        raise ValueError(f"chunk_rows: expected a positive int or None, got {chunk_rows!r}")


def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor] = None,
                         class_weight: Optional[Tensor] = None, ignore_index: int = -100, reduction: str = "mean",
                         label_smoothing: float = 0.0, *, lse_square_scale: float = 0.0, softcap: float = 0.0,
                         chunk_rows: Optional[int] = None, check_targets: bool = False) -> Tensor:
    """cross_entropy(torch.nn.functional.linear(hidden, weight, bias), target, class_weight,
    ignore_index, reduction, label_smoothing, lse_square_scale=..., softcap=...) without holding the
    logits: differentiable with respect to hidden, weight and bias.

    hidden: [..., H] (float32, float16, bfloat16, float64); weight: [V, H] and bias: [V], of hidden's
    dtype; target: int64 class indices of hidden's shape without H; class_weight: [V] per-class
    weights (torch's `weight` of cross_entropy). chunk_rows: rows whose logits exist at once; the
    default keeps them within 1/8 of the full logits (see plan_chunk_rows). The GEMMs follow
    torch's matmul settings (TF32 for float32 when torch.backends.cuda.matmul.allow_tf32 is set).
    Per-row losses equal cross_entropy of the same logits; the logits and dweight depend on how
    cuBLAS splits a chunk, so results match the unchunked form within the GEMM's rounding.
    """
    _check(hidden, weight, target, bias, class_weight, reduction, chunk_rows)
    features = hidden.reshape(-1, hidden.shape[-1])
    rows = target.reshape(-1)
    classes = weight.shape[0]
    if check_targets:
        _check_class_indices(rows, classes, int(ignore_index))
    values = _row_values_dtype(hidden)
    w = None if class_weight is None else class_weight.to(device=hidden.device, dtype=values)
    options = (int(ignore_index), float(label_smoothing), float(lse_square_scale), float(softcap))
    chunk = plan_chunk_rows(features.shape[0], classes, hidden.element_size(), chunk_rows)
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad
                                              or (bias is not None and bias.requires_grad))
    if reduction == "none":
        if needs_grad:
            loss = _RowLosses.apply(features, weight, bias, rows, w, options, chunk)
        else:
            loss, _ = _ops.linear_cross_entropy_forward(features, weight, bias, rows, w, *options, chunk)
        return loss.reshape(target.shape).to(hidden.dtype)
    divisor = None
    if reduction == "mean":
        kept = (rows != ignore_index).to(values)
        if w is not None:
            kept = kept * w[rows.clamp(0, classes - 1)]
        divisor = _sum(kept)
    if not needs_grad:
        loss, _ = _ops.linear_cross_entropy_forward(features, weight, bias, rows, w, *options, chunk)
        total = _sum(loss)
        return (total if divisor is None else total / divisor).to(hidden.dtype)
    share = torch.ones((), dtype=values, device=hidden.device) if divisor is None else 1.0 / divisor
    grad_loss = share.expand(rows.shape[0]).contiguous()
    return _ReducedLoss.apply(features, weight, bias, rows, w, grad_loss, divisor, options, chunk).to(hidden.dtype)


__all__ = ["linear_cross_entropy", "plan_chunk_rows"]
