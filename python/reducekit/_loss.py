# SPDX-License-Identifier: Apache-2.0
"""Cross-entropy: torch.nn.functional.cross_entropy's signature (class-index or class-probability
targets), plus a z-loss (lse_square_scale), logit soft-capping (softcap) and an optional check of
the class indices (check_targets), on reducekit's kernels.

    loss = reducekit.cross_entropy(logits, target, weight=None, ignore_index=-100,
                                   reduction="mean", label_smoothing=0.0, *,
                                   lse_square_scale=0.0, softcap=0.0, check_targets=False)

Class-index targets run the fused kernels (torch.ops.reducekit.cross_entropy_forward /
_backward, python/csrc/loss_ops.cpp), which give each row's loss and logsumexp in float32
(float64 for float64 logits). 'sum' and 'mean' are one op, torch.ops.reducekit.cross_entropy_loss:
the forward kernel, then one CTA that adds the rows in a fixed order (deterministic, no atomics),
'mean' over the kept rows' class weights as torch; its autograd is C++ (loss_autograd.cpp), whose
backward hands the backward kernel one upstream gradient for every row. A target
outside [0, classes) that is not ignore_index makes its row's loss NaN (torch raises a
device-side assert instead, which kills the context); check_targets=True raises instead.

Class-probability targets (a floating-point target of the input's shape, as torch decides) of
the input's dtype run on fused kernels (torch.ops.reducekit.cross_entropy_probs_forward /
_backward: one pass over the logits and the target for each row's loss, one more for the
gradients of both; 'mean' and 'sum' as one op, cross_entropy_probs_loss, with C++ autograd).
Other target dtypes, and class weights that require a gradient, are composed from reducekit ops:
reducekit.log_softmax over the class dim, a product with the (smoothed) target and the weights
in torch's elementwise ops, reducekit.sum over the class dim; autograd runs through those ops
(gradients reach the target too).
"""
import math

import torch

from ._softmax import log_softmax as _log_softmax
from ._reduce import logsumexp as _logsumexp
from ._reduce import sum as _sum

_ops = torch.ops.reducekit


_FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# The class-probability kernels where they apply (the composed path otherwise, and where this is
# False); tests/python/test_cross_entropy.py runs both paths.
_FUSED_PROBABILITY_TARGETS = True


def _values_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _row_values_dtype(logits):
    return _values_dtype(logits.dtype)


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
    # needs_input_grad holds the arguments the call passed: none for a weight left at its default
    if len(ctx.needs_input_grad) > 2 and ctx.needs_input_grad[2]:  # as torch's F.cross_entropy
        raise RuntimeError("weight: the gradient of cross_entropy with class-index targets with respect to the class "
                           "weights is not implemented (torch's is not either)")
    logits, target, weight, lse = ctx.saved_tensors
    dlogits = _ops.cross_entropy_backward(logits, target, weight, lse, grad_loss.contiguous(), *ctx.options)
    return dlogits, None, None, None, None, None, None


torch.library.register_autograd("reducekit::cross_entropy_forward", _backward, setup_context=_setup)


@torch.library.register_fake("reducekit::cross_entropy_loss")
def _loss_fake(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
               lse_square_scale=0.0, softcap=0.0):
    dtype = _row_values_dtype(logits)
    return logits.new_empty(()), logits.new_empty(logits.shape[:-1], dtype=dtype), logits.new_empty((), dtype=dtype)


@torch.library.register_fake("reducekit::cross_entropy_reduce")
def _reduce_fake(loss, target, weight, ignore_index, reduction, dtype):
    return target.new_empty((), dtype=dtype), target.new_empty((), dtype=_values_dtype(dtype))


@torch.library.register_fake("reducekit::cross_entropy_fused")
def _fused_fake(logits, target, weight, grad_loss, ignore_index, label_smoothing, lse_square_scale, softcap):
    loss, lse = _forward_fake(logits, target)
    return loss, lse, torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.register_fake("reducekit::cross_entropy_fused_")
def _fused_inplace_fake(logits, target, weight, grad_loss, ignore_index, label_smoothing, lse_square_scale, softcap):
    return _forward_fake(logits, target)


@torch.library.register_fake("reducekit::cross_entropy_step")
def _step_fake(logits, target, weight, ignore_index, reduction, label_smoothing, lse_square_scale, softcap,
               grad_scale):
    return logits.new_empty(()), torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.register_fake("reducekit::cross_entropy_step_")
def _step_inplace_fake(logits, target, weight, ignore_index, reduction, label_smoothing, lse_square_scale, softcap,
                       grad_scale):
    return logits.new_empty(())


@torch.library.register_fake("reducekit::cross_entropy_probs_forward")
def _probs_forward_fake(logits, target, weight=None, label_smoothing=0.0, lse_square_scale=0.0, softcap=0.0):
    rows = logits.shape[:-1]
    dtype = _row_values_dtype(logits)
    return tuple(logits.new_empty(rows, dtype=dtype) for _ in range(3))


@torch.library.register_fake("reducekit::cross_entropy_probs_loss")
def _probs_loss_fake(logits, target, weight=None, reduction="mean", label_smoothing=0.0, lse_square_scale=0.0,
                     softcap=0.0, dtype=None):
    _, lse, mass = _probs_forward_fake(logits, target)
    return logits.new_empty((), dtype=dtype or logits.dtype), lse, mass, lse.new_empty(())


@torch.library.register_fake("reducekit::cross_entropy_probs_backward")
def _probs_backward_fake(logits, target, weight, lse, mass, grad_loss, label_smoothing, lse_square_scale, softcap,
                         target_grad):
    dtarget = torch.empty_like(logits, memory_format=torch.contiguous_format) if target_grad else logits.new_empty((0,))
    return torch.empty_like(logits, memory_format=torch.contiguous_format), dtarget


def _probs_setup(ctx, inputs, output):
    logits, target, weight, label_smoothing, lse_square_scale, softcap = inputs
    ctx.save_for_backward(logits, target, weight, output[1], output[2])
    ctx.options = (label_smoothing, lse_square_scale, softcap)
    ctx.mark_non_differentiable(output[1], output[2])


def _probs_backward(ctx, grad_loss, grad_lse, grad_mass):
    logits, target, weight, lse, mass = ctx.saved_tensors
    target_grad = ctx.needs_input_grad[1]
    dlogits, dtarget = _ops.cross_entropy_probs_backward(logits, target, weight, lse, mass, grad_loss.contiguous(),
                                                         *ctx.options, target_grad)
    return dlogits, dtarget if target_grad else None, None, None, None, None


torch.library.register_autograd("reducekit::cross_entropy_probs_forward", _probs_backward, setup_context=_probs_setup)


@torch.compiler.disable  # runs eagerly: a graph break under torch.compile, refused by fullgraph=True
def _check_class_indices(target, classes, ignore_index):
    """Raises ValueError naming the first target (in flattened order) that is neither a class
    index in [0, classes) nor ignore_index. One host sync (.tolist())."""
    flat = target.reshape(-1)
    if flat.numel() == 0:
        return
    bad = ((flat < 0) | (flat >= classes)) & (flat != ignore_index)
    first = torch.argmax(bad.to(torch.uint8))  # the first True; 0 when there is none
    found, position, value = torch.stack([bad[first].to(torch.int64), first, flat[first].to(torch.int64)]).tolist()
    if found:
        raise ValueError(f"target: {value} at flattened index {position} is not a class index in "
                         f"[0, {classes}) nor ignore_index ({ignore_index})")


def _probability_loss(input, target, weight, ignore_index, reduction, label_smoothing, lse_square_scale, softcap):
    """torch's class-probability cross-entropy: on the fused kernels where the target has the
    input's dtype and the class weights need no gradient, otherwise composed from
    reducekit.log_softmax, torch's elementwise ops and reducekit.sum (see cross_entropy)."""
    if not target.is_floating_point():
        raise ValueError(f"target: a target of the input's shape {tuple(input.shape)} holds class probabilities and "
                         f"must be floating point, got {target.dtype}")
    if ignore_index >= 0:  # torch: "ignore_index is not supported for floating point target"
        raise ValueError(f"ignore_index: not supported with class-probability targets (got {ignore_index}; "
                         "a negative value, such as the default -100, is ignored)")
    if input.dim() == 0:
        raise ValueError("input: expected [C], [N, C] or [N, C, d1, ...] logits, got a 0-dim tensor")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing: expected a value in [0, 1], got {label_smoothing}")
    if not math.isfinite(lse_square_scale):
        raise RuntimeError(f"lse_square_scale: expected a finite value, got {lse_square_scale}")
    if softcap != 0.0 and not (math.isfinite(softcap) and softcap > 0.0):
        raise RuntimeError(f"softcap: expected 0 (off) or a finite positive value, got {softcap}")
    class_dim = 0 if input.dim() == 1 else 1
    classes = input.shape[class_dim]
    out_dtype = torch.promote_types(input.dtype, target.dtype)  # torch's result dtype
    if weight is not None:
        if weight.dim() != 1 or weight.shape[0] != classes:
            raise RuntimeError(f"weight: expected one value a class ({classes}), got shape {tuple(weight.shape)}")
        out_dtype = torch.promote_types(out_dtype, weight.dtype)
    values = _values_dtype(out_dtype)

    fused = (_FUSED_PROBABILITY_TARGETS and target.dtype == input.dtype and input.dtype in _FUSED_DTYPES
             and classes > 0 and not (weight is not None and weight.requires_grad))
    if fused:
        if input.dim() <= 2:
            logits, probs = input.reshape(-1, classes), target.reshape(-1, classes)
        else:  # [N, C, d1, ...]: classes last, a row per position (copies)
            logits, probs = input.movedim(1, -1).reshape(-1, classes), target.movedim(1, -1).reshape(-1, classes)
        w = None if weight is None else weight.to(_row_values_dtype(input))
        options = (label_smoothing, lse_square_scale, softcap)
        if reduction == "none":
            loss, _, _ = _ops.cross_entropy_probs_forward(logits, probs, w, *options)
            shape = [n for d, n in enumerate(input.shape) if d != class_dim]
            return loss.reshape(shape).to(out_dtype)
        # One op with C++ autograd, the mean over the rows in its kernel; the result in out_dtype
        # where the logits' accumulation dtype holds it (float64 weights on 16-bit logits: cast).
        dtype = out_dtype if values == _row_values_dtype(input) else None
        return _ops.cross_entropy_probs_loss(logits, probs, w, reduction, *options, dtype)[0].to(out_dtype)

    z = input if softcap == 0.0 else softcap * torch.tanh(input / softcap)
    logp = _log_softmax(z, class_dim)
    q = target if label_smoothing == 0.0 else target * (1.0 - label_smoothing) + label_smoothing / classes
    product = logp * q
    if weight is not None:
        shape = [1] * input.dim()
        shape[class_dim] = classes
        product = product * weight.reshape(shape)
    rows = -_sum(product, class_dim, dtype=values)
    if lse_square_scale != 0.0:
        lse = _logsumexp(z, class_dim).to(values)
        rows = rows + lse_square_scale * lse * lse
    if reduction == "none":
        return rows.to(out_dtype)
    total = _sum(rows)
    if reduction == "sum":
        return total.to(out_dtype)
    # torch's rule for probability targets: 'mean' is over the batch elements, not over weights
    # (no elements: 0 / 0 = NaN, as torch)
    count = input.numel() // classes if classes > 0 else 0
    return (total / count).to(out_dtype)


def _check_index_target_shape(input, target):
    """Class indices have input's shape without the class dim (dim 1, or the only dim of one
    unbatched row, whose target may also hold one element); torch raises RuntimeError otherwise.
    Logits of rank 0 are left to the class dim's IndexError."""
    if input.dim() == 0:
        return
    expected = [input.shape[0], *input.shape[2:]] if input.dim() >= 2 else []
    if list(target.shape) != expected and not (input.dim() == 1 and target.numel() == 1):
        raise RuntimeError(f"target: expected class indices of shape {expected} for input of shape "
                           f"{list(input.shape)}, got {list(target.shape)}")


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                  lse_square_scale=0.0, softcap=0.0, check_targets=False):
    """torch.nn.functional.cross_entropy(input, target, weight, ignore_index=-100, reduction="mean",
    label_smoothing=0.0) on reducekit's kernels, with extras.

    input: logits [C], [N, C] or [N, C, d1, ...] (float32, bfloat16, float16, float64).
    target, as torch decides by shape:
      - class indices (int64), of input's shape without the class dim: the fused kernels. A
        target outside [0, C) that is not ignore_index gives its row a NaN loss (and NaN
        gradient), with no out-of-bounds access and no device-side assert.
      - class probabilities (floating point, of input's shape): torch's semantics,
        loss_i = -sum_c w_c q_ic log_softmax(x)_ic with q = p * (1 - label_smoothing) +
        label_smoothing / C; 'mean' divides by the number of batch elements (numel / C), not by
        the weights, as torch; ignore_index >= 0 is a ValueError (torch refuses it too), a
        negative one is ignored; any floating target dtype is taken and the result has torch's
        promoted dtype of input, target and weight. Unfused: reducekit.log_softmax over the class
        dim (read in place for [N, C, d1, ...]), the product with q and w in torch's
        elementwise ops in that dtype, reducekit.sum over the class dim (float32 accumulation,
        float64 for float64); so the logits are read once and the log-probabilities once more,
        and a log-probability tensor of the input's size is held for backward. Differentiable
        with respect to input and target through those ops' autograd. lse_square_scale and
        softcap apply as for class indices (softcap's tanh and the z-loss's
        reducekit.logsumexp are further passes, in the input's dtype).
    Extras (keyword-only):
      lse_square_scale: z-loss, adds lse_square_scale * logsumexp(z)^2 to each kept row's loss.
      softcap: > 0 replaces the logits by softcap * tanh(logits / softcap) before the softmax.
      check_targets: with class-index targets, check every target once (one host sync) and
        raise ValueError naming `target`, the first bad value and its flattened index when one
        is outside [0, C) and is not ignore_index. The sync and .tolist() make torch.compile
        break the graph there (fullgraph=True refuses it); the default, False, adds nothing to
        the graph and leaves such rows NaN. Probability targets have no indices; it does nothing
        there (torch checks nothing about probabilities either).
    """
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction: expected 'none', 'sum' or 'mean', got {reduction!r}")
    if input.shape == target.shape:  # torch's test for class probabilities
        return _probability_loss(input, target, weight, int(ignore_index), reduction, float(label_smoothing),
                                 float(lse_square_scale), float(softcap))
    if target.is_floating_point():
        raise ValueError(f"target: a floating-point target holds class probabilities and needs the input's shape "
                         f"{tuple(input.shape)}, got {tuple(target.shape)}; class indices are int64")
    _check_index_target_shape(input, target)
    if input.dim() == 1:  # one unbatched row
        logits, rows = input.unsqueeze(0), target.reshape(1)
    elif input.dim() == 2:
        logits, rows = input, target
    else:  # [N, C, d1, ...]: classes last, a row per position (a copy)
        logits, rows = input.movedim(1, -1).reshape(-1, input.shape[1]), target.reshape(-1)
    if check_targets:
        _check_class_indices(target, logits.shape[-1], int(ignore_index))
    values = _row_values_dtype(input)
    w = None if weight is None else weight.to(values)
    options = (float(label_smoothing), float(lse_square_scale), float(softcap))
    if reduction == "none":
        loss, _ = _ops.cross_entropy_forward(logits, rows, w, int(ignore_index), *options)
        return loss.reshape(target.shape).to(input.dtype)
    return _ops.cross_entropy_loss(logits, rows, w, int(ignore_index), reduction, *options)[0]



def cross_entropy_with_grad(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                            lse_square_scale=0.0, softcap=0.0, grad_scale=1.0, inplace=False):
    """The loss of cross_entropy (class-index targets) and its gradient with respect to input, in
    one call (a training step's forward and backward together): 16-bit vocabulary rows are read
    once into shared memory and their gradient written from there (torch.ops.reducekit.
    cross_entropy_fused); other rows run the forward and backward kernels.

    Returns (loss, grad): loss as cross_entropy(input, target, weight, ignore_index, reduction,
    label_smoothing, lse_square_scale=..., softcap=...) gives it, and grad = d(grad_scale * loss) /
    d input, of input's shape and dtype. For reduction 'none', grad_scale may be a tensor of
    loss's shape (each row's upstream gradient). inplace=True writes grad over input and returns
    input as grad: a training step then needs no tensor of the logits' size besides them (input
    must not be needed afterwards). Neither output carries autograd history: pass grad on
    yourself (for example logits.backward(grad) from the layer before).

    input: [N, C] or [C]; target: int64 class indices of input's shape without C. A target outside
    [0, C) that is not ignore_index gives its row a NaN loss and NaN gradient, as in cross_entropy.
    """
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction: expected 'none', 'sum' or 'mean', got {reduction!r}")
    if input.dim() not in (1, 2):
        raise ValueError(f"input: expected logits [N, C] or [C], got {input.dim()} dims (move the class dim last "
                         "and flatten the rest into rows)")
    if target.dtype != torch.int64:
        raise ValueError(f"target: expected int64 class indices, got {target.dtype}")
    _check_index_target_shape(input, target)
    logits = input.unsqueeze(0) if input.dim() == 1 else input
    rows = target.reshape(-1)
    values = _row_values_dtype(input)
    w = None if weight is None else weight.to(values)
    options = (int(ignore_index), float(label_smoothing), float(lse_square_scale), float(softcap))
    if reduction != "none" and torch.is_tensor(grad_scale) and grad_scale.numel() != 1:
        raise ValueError(f"grad_scale: expected a number or a one-element tensor for reduction {reduction!r}")
    if reduction != "none" and not torch.is_tensor(grad_scale):
        # One C++ call: the denominator's kernel (grad_scale over it), the fused kernel started
        # behind it, the losses' reduce behind that; the same kernels and bits as the steps below.
        args = (rows, w, int(ignore_index), reduction, *options[1:], float(grad_scale))
        with torch.no_grad():
            if inplace:
                return _ops.cross_entropy_step_(logits, *args), input
            loss, grad = _ops.cross_entropy_step(logits, *args)
            return loss, grad.reshape(input.shape)
    if reduction == "mean":  # a one-element tensor grad_scale
        # grad_scale over the mean's denominator (taken before the losses), one value for every
        # row: a true division, as the reduced loss's backward divides (x / d, not x * (1 / d)).
        denominator = _ops.cross_entropy_reduce(None, rows, w, int(ignore_index), "mean", values)[1]
        grad_loss = torch.div(grad_scale.to(device=input.device, dtype=values).reshape(()), denominator).reshape(1)
    elif torch.is_tensor(grad_scale):
        grad_loss = grad_scale.to(device=input.device, dtype=values).reshape(-1)
        if grad_loss.numel() != 1:
            grad_loss = grad_loss.expand(rows.shape[0]).contiguous()
    else:  # 'none': one number for every row
        grad_loss = torch.full((1,), float(grad_scale), dtype=values, device=input.device)
    with torch.no_grad():  # the gradient is the output here, not something autograd records
        if inplace:
            loss, _ = _ops.cross_entropy_fused_(logits, rows, w, grad_loss, *options)
            grad = input
        else:
            loss, _, grad = _ops.cross_entropy_fused(logits, rows, w, grad_loss, *options)
            grad = grad.reshape(input.shape)
    if reduction == "none":
        return loss.reshape(target.shape).to(input.dtype), grad
    return _ops.cross_entropy_reduce(loss, rows, w, int(ignore_index), reduction, input.dtype)[0], grad


__all__ = ["cross_entropy", "cross_entropy_with_grad"]
