# SPDX-License-Identifier: Apache-2.0
"""cross_entropy over vocabulary rows, for the benchmark registry: the forward ('mean' over the
rows) and the forward with its backward (the gradient of the logits, as training runs it), and that
step with reducekit's fused kernel (cross_entropy_step, counted as the least a step moves)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from peers import compile_fresh
from registry import BuildContext, Impl, NotApplicable, OpSpec, register, rows_of, rows_tensor

# Language-model vocabularies (GPT-2, Llama 2 / 3, Qwen, Gemma) at token counts of a step.
SHAPES = [(4096, 32000), (8192, 50257), (4096, 128256), (2048, 151936), (1024, 256000), (32768, 8192)]
QUICK = [(8192, 50257), (4096, 128256)]
ODD = [(2048, 50257), (2048, 50264), (1024, 151936)]


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


def _register(name, training, fused=False):
    """fused: reducekit's step is cross_entropy_with_grad (loss and gradient from one kernel); the
    peers' is the same forward and autograd backward as `training`."""
    torch_fn = (lambda x, t: F.cross_entropy(x, t))

    def build_reducekit(ctx: BuildContext, inputs):
        if ctx.reducekit is None or not hasattr(ctx.reducekit, "cross_entropy"):
            raise NotApplicable("reducekit.cross_entropy is not built")
        if fused:
            with_grad = ctx.reducekit.cross_entropy_with_grad
            return Impl(lambda x, t: with_grad(x, t)[1])
        fn = ctx.reducekit.cross_entropy
        return Impl(_with_grad(fn) if training else fn)

    def build_torch(ctx, inputs):
        return Impl(_with_grad(torch_fn) if training else torch_fn)

    def build_compile(ctx, inputs):
        # The loss is compiled; the training step's leaf and backward stay outside (dynamo does not
        # trace requires_grad_()). Warmed on a leaf that requires grad, as the step calls it.
        if not training:
            compiled, seconds = compile_fresh(torch_fn, inputs)
            return Impl(compiled, {"compile_s": round(seconds, 2)})
        x, target = inputs
        compiled, seconds = compile_fresh(torch_fn, (x.detach().requires_grad_(), target))
        return Impl(_with_grad(compiled), {"compile_s": round(seconds, 2)})

    def reference(x, target):
        if not training:
            return F.cross_entropy(x.double(), target)
        return _with_grad(torch_fn)(x.double(), target)

    def tolerance(dtype):
        if dtype == torch.float64:
            return 1e-12, 1e-10
        if dtype == torch.float32:
            return 1e-6, 2e-5
        return 1e-4, 2e-2

    bytes_moved = _step_bytes if fused else _training_bytes if training else _forward_bytes
    register(OpSpec(name=name, make_inputs=_make_inputs, bytes_moved=bytes_moved,
                    reference=reference,
                    impls={"reducekit": build_reducekit, "torch": build_torch, "torch.compile": build_compile},
                    shapes=list(SHAPES), quick_shapes=list(QUICK), odd_shapes=list(ODD), tolerance=tolerance))


_register("cross_entropy", training=False)
_register("cross_entropy_training", training=True)
_register("cross_entropy_step", training=True, fused=True)
