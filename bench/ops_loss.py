# SPDX-License-Identifier: Apache-2.0
"""cross_entropy over vocabulary rows, for the benchmark registry: the forward ('mean' over the
rows) and the forward with its backward (the gradient of the logits, as training runs it), and that
step with reducekit's fused kernel (cross_entropy_step, counted as the least a step moves). Peers:
torch, torch.compile and reducekit-unfused (reducekit.log_softmax, then torch's nll_loss: what the
fused kernels replace). The two training ops record each implementation's peak memory of a step.
cross_entropy_probs and cross_entropy_probs_training: the same against class-probability targets
(a softmax row per logits row, in the logits' dtype); the unfused peer is reducekit.log_softmax times
the targets, summed by torch."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from peers import compile_fresh
from registry import BuildContext, Impl, NotApplicable, OpSpec, register, rows_of, rows_tensor

# Language-model vocabularies (Llama 2, GPT-2, Llama 3, Qwen, Gemma) at token counts of a step
# (issue 16's grid). The largest point, 16384 x 256000 float32 (4.2e9 elements, past 2^31), holds
# the logits (15.6 GiB) and the gradient's float64 oracle (31.3 GiB) through the point; torch's
# training step adds its log-probabilities, their gradient and the logits' gradient (3 x 15.6 GiB),
# about 94 GiB in all at its peak, within the H200's 139 GiB. The forward's oracle peaks at the
# logits and two float64 copies (78 GiB); check_output compares in chunks for that reason.
VOCABS = (32000, 50257, 128256, 151936, 256000)
SHAPES = [(m, v) for m in (4096, 16384) for v in VOCABS]
QUICK = [(4096, 50257), (16384, 128256)]
# GPT-2's odd vocabulary beside its padded twin (50264 = 8 x 6283) at both row counts.
ODD = [(4096, 50257), (4096, 50264), (16384, 50257), (16384, 50264)]


def _make_inputs(shape, dtype):
    x = rows_tensor(shape, dtype)
    m, n = rows_of(shape)
    target = torch.randint(0, n, (m,), device="cuda")
    return x, target


def _element_bytes(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _forward_bytes(shape, dtype):
    m, n = rows_of(shape)
    return m * n * _element_bytes(dtype) + m * 8  # logits once, targets once


def _training_bytes(shape, dtype):
    m, n = rows_of(shape)
    return 3 * m * n * _element_bytes(dtype) + m * 8  # logits twice (forward, backward), dlogits once


def _step_bytes(shape, dtype):
    m, n = rows_of(shape)
    return 2 * m * n * _element_bytes(dtype) + m * 8  # the least a step moves: logits once, dlogits once


def _with_grad(loss_fn):
    def step(x, target):
        x = x.detach().requires_grad_()
        loss_fn(x, target).backward()
        return x.grad
    return step


def _grad_reference(x, target):
    """d mean(cross_entropy) / d logits in float64, (softmax(x) - one_hot(target)) / M, built in
    place in one float64 copy (a copy for float64 logits too): autograd on x.double() would hold
    four (125 GiB at 16384 x 256000)."""
    g = x.to(torch.float64, copy=True)
    g.sub_(g.amax(-1, keepdim=True)).exp_()
    g.div_(g.sum(-1, keepdim=True))
    rows = torch.arange(g.shape[0], device=g.device)
    g.index_put_((rows, target), torch.tensor(-1.0, dtype=g.dtype, device=g.device), accumulate=True)
    return g.div_(g.shape[0])


def _compiled_builder(torch_fn, training):
    """torch.compile's peer: the loss is compiled; the training step's leaf and backward stay
    outside (dynamo does not trace requires_grad_()). Warmed on a leaf that requires grad, as the
    step calls it."""
    def build_compile(ctx, inputs):
        if not training:
            compiled, seconds = compile_fresh(torch_fn, inputs)
            return Impl(compiled, {"compile_s": round(seconds, 2)})
        x, target = inputs
        compiled, seconds = compile_fresh(torch_fn, (x.detach().requires_grad_(), target))
        return Impl(_with_grad(compiled), {"compile_s": round(seconds, 2)})
    return build_compile


def _tolerance(dtype):
    if dtype == torch.float64:
        return 1e-12, 1e-10
    if dtype == torch.float32:
        return 1e-6, 2e-5
    return 1e-4, 2e-2


def _register_spec(name, make_inputs, bytes_moved, reference, training, build_reducekit, build_torch, build_compile,
                   build_unfused):
    """A loss op of the vocabulary grid against torch, torch.compile and the unfused composition."""
    register(OpSpec(name=name, make_inputs=make_inputs, bytes_moved=bytes_moved, reference=reference,
                    impls={"reducekit": build_reducekit, "torch": build_torch, "torch.compile": build_compile,
                           "reducekit-unfused": build_unfused},
                    shapes=list(SHAPES), quick_shapes=list(QUICK), odd_shapes=list(ODD), tolerance=_tolerance,
                    measure_peak=training))


def _register(name, training, fused=False):
    """fused: reducekit's step is cross_entropy_with_grad (loss and gradient from one kernel); the
    peers' is the same forward and autograd backward as `training`."""
    torch_fn = (lambda x, t: F.cross_entropy(x, t))
    step = _with_grad if training else (lambda fn: fn)

    def build_reducekit(ctx: BuildContext, inputs):
        if ctx.reducekit is None or not hasattr(ctx.reducekit, "cross_entropy"):
            raise NotApplicable("reducekit.cross_entropy is not built")
        if fused:
            with_grad = ctx.reducekit.cross_entropy_with_grad
            return Impl(lambda x, t: with_grad(x, t)[1], inplace=lambda x, t: with_grad(x, t, inplace=True)[1])
        return Impl(step(ctx.reducekit.cross_entropy))

    def build_unfused(ctx, inputs):
        # The composition a fused cross_entropy saves: the log-probabilities written out (and held
        # for backward), read again by nll_loss; backward through both ops' autograd.
        if ctx.reducekit is None or not hasattr(ctx.reducekit, "log_softmax"):
            raise NotApplicable("reducekit.log_softmax is not built")
        log_softmax = ctx.reducekit.log_softmax
        return Impl(step(lambda x, t: F.nll_loss(log_softmax(x, -1), t)))

    def build_torch(ctx, inputs):
        return Impl(step(torch_fn))

    build_compile = _compiled_builder(torch_fn, training)

    def reference(x, target):
        return _grad_reference(x, target) if training else F.cross_entropy(x.double(), target)

    bytes_moved = _step_bytes if fused else _training_bytes if training else _forward_bytes
    _register_spec(name, _make_inputs, bytes_moved, reference, training, build_reducekit, build_torch, build_compile,
                   build_unfused)


_register("cross_entropy", training=False)
_register("cross_entropy_training", training=True)
_register("cross_entropy_step", training=True, fused=True)


def _make_probs_inputs(shape, dtype):
    x = rows_tensor(shape, dtype)
    probs = torch.softmax(torch.randn(x.shape, device="cuda", dtype=torch.float32), -1).to(dtype)
    return x, probs


def _probs_forward_bytes(shape, dtype):
    m, n = rows_of(shape)
    return 2 * m * n * _element_bytes(dtype)  # logits and targets once


def _probs_training_bytes(shape, dtype):
    m, n = rows_of(shape)
    return 5 * m * n * _element_bytes(dtype)  # logits and targets twice (forward, backward), dlogits once


def _probs_grad_reference(x, probs):
    """d mean(cross_entropy) / d logits in float64: (softmax(x) sum(p) - p) / M."""
    g = x.to(torch.float64, copy=True)
    g.sub_(g.amax(-1, keepdim=True)).exp_()
    p = probs.double()
    g.mul_(p.sum(-1, keepdim=True) / g.sum(-1, keepdim=True)).sub_(p)
    return g.div_(g.shape[0])


def _register_probs(name, training):
    step = _with_grad if training else (lambda fn: fn)

    def build_reducekit(ctx: BuildContext, inputs):
        # reducekit.cross_entropy as a user calls it: a target of the logits' dtype runs the fused
        # kernels, the mean in the same op (cross_entropy_probs_loss, C++ autograd).
        if ctx.reducekit is None or not hasattr(torch.ops.reducekit, "cross_entropy_probs_loss"):
            raise NotApplicable("torch.ops.reducekit.cross_entropy_probs_loss is not built")
        return Impl(step(ctx.reducekit.cross_entropy))

    def build_unfused(ctx, inputs):
        # reducekit.cross_entropy's composed path: log-probabilities written out, then the product
        # and its sum in torch's ops.
        if ctx.reducekit is None or not hasattr(ctx.reducekit, "log_softmax"):
            raise NotApplicable("reducekit.log_softmax is not built")
        log_softmax = ctx.reducekit.log_softmax
        return Impl(step(lambda x, p: -(log_softmax(x, -1) * p).sum(-1).mean()))

    def build_torch(ctx, inputs):
        return Impl(step(F.cross_entropy))

    build_compile = _compiled_builder(F.cross_entropy, training)

    def reference(x, probs):
        return _probs_grad_reference(x, probs) if training else F.cross_entropy(x.double(), probs.double())

    _register_spec(name, _make_probs_inputs, _probs_training_bytes if training else _probs_forward_bytes, reference,
                   training, build_reducekit, build_torch, build_compile, build_unfused)


_register_probs("cross_entropy_probs", training=False)
_register_probs("cross_entropy_probs_training", training=True)
