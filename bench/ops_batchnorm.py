# SPDX-License-Identifier: Apache-2.0
"""batch_norm over [N, C, H, W] activations, for the benchmark registry.

    batch_norm                 training forward: batch statistics, y, running statistics updated
    batch_norm_inference       eval forward: y from the running statistics
    batch_norm_training        a training step: the training forward, then dx, dweight, dbias
    <op>_nhwc                  the same on channels_last x (and dy), y (and dx) channels_last too

The registry keys points on shape tuples alone, so the layout is part of the op's name. weight,
bias and the running statistics are float32 for 16-bit x (float64 for float64), as torch's
BatchNorm modules keep them, so every peer runs the same mixed-precision problem.

Bytes moved (per-channel vectors, a few KB, not counted): the forwards x read + y written; the
training step x, y, dy and dx once each (the fewest a forward and a backward that do not keep
anything but the per-channel statistics between them can move). Peers: torch eager
(F.batch_norm, what the nn modules call) and torch.compile (fresh per shape; for the training
step the forward is compiled and the leaf and backward stay outside, as ops_loss.py does).
"""
from __future__ import annotations

import torch

from ops_norm import norm_tolerance  # the same sanity tolerance (sums over many values)
from peers import compile_fresh
from registry import BuildContext, Impl, NotApplicable, OpSpec, register

F = torch.nn.functional
EPS = 1e-5
MOMENTUM = 0.1

# ResNet-style activations: early wide maps, the middle stages, the last stage's 7x7 at a large
# batch, and a small-channel high-resolution map (segmentation / diffusion U-Net style).
SHAPES = [(32, 64, 112, 112), (64, 256, 28, 28), (256, 1024, 7, 7), (8, 32, 256, 256)]
QUICK = [(32, 64, 112, 112), (256, 1024, 7, 7)]
# Odd channel counts and spatial sizes (scalar loads) beside a padded twin.
ODD = [(16, 37, 55, 55), (16, 40, 56, 56)]


def _elt(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _param_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _memory_format(shape, layout):
    if layout == "nhwc":
        if len(shape) == 4:
            return torch.channels_last
        if len(shape) == 5:
            return torch.channels_last_3d
    return torch.contiguous_format


def _need_reducekit(ctx: BuildContext):
    if ctx.reducekit is None or not hasattr(ctx.reducekit, "batch_norm"):
        raise NotApplicable("reducekit.batch_norm is not built")
    return ctx.reducekit


def _make_inputs(layout, step):
    def make_inputs(shape, dtype):
        fmt = _memory_format(shape, layout)
        x = torch.randn(tuple(shape), device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        c = int(shape[1])
        pdt = _param_dtype(dtype)
        w = (1 + 0.1 * torch.randn(c, device="cuda")).to(pdt)
        b = (0.1 * torch.randn(c, device="cuda")).to(pdt)
        rm = (0.1 * torch.randn(c, device="cuda")).to(pdt)
        rv = (1 + 0.1 * torch.rand(c, device="cuda")).to(pdt)
        if not step:
            return x, w, b, rm, rv
        w.requires_grad_(True)  # parameters, as a training step has them: dweight and dbias computed
        b.requires_grad_(True)
        dy = torch.randn_like(x)  # randn_like keeps x's memory format
        return x, w, b, rm, rv, dy
    return make_inputs


def _forward_bytes(shape, dtype):
    return 2 * _numel(shape) * _elt(dtype)  # x read, y written


def _step_bytes(shape, dtype):
    return 4 * _numel(shape) * _elt(dtype)  # x, y, dy, dx once each


def _torch_forward(training):
    def forward(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, training, MOMENTUM, EPS)
    return forward


def _reducekit_forward(rk, training):
    def forward(x, w, b, rm, rv):
        return rk.batch_norm(x, rm, rv, w, b, training=training, momentum=MOMENTUM, eps=EPS)
    return forward


def _with_grad(forward):
    """A training step: forward on a fresh leaf, then dx, dweight, dbias (not accumulated)."""
    def step(x, w, b, rm, rv, dy):
        x = x.detach().requires_grad_()
        y = forward(x, w, b, rm, rv)
        return torch.autograd.grad(y, (x, w, b), dy)
    return step


def _reference(training, step):
    """float64 on the same values; the running statistics are copied, so the inputs stay as they are."""
    def d(t):
        return t.detach().double()

    def forward(x, w, b, rm, rv):
        return F.batch_norm(x.double(), d(rm), d(rv), d(w), d(b), training, MOMENTUM, EPS)

    def reference_step(x, w, b, rm, rv, dy):
        xd, wd, bd = (d(t).requires_grad_() for t in (x, w, b))
        y = F.batch_norm(xd, d(rm), d(rv), wd, bd, True, MOMENTUM, EPS)
        return torch.autograd.grad(y, (xd, wd, bd), dy.double())

    return reference_step if step else forward


def _path(x, training, step):
    """Which kernels ran: x read once (single-read clusters) or twice (three passes)."""
    if not training:
        return {"path": "one pass"}
    reads = torch.ops.reducekit.batch_norm_reads_once
    forward = "single-read" if reads(x, False) else "three-pass"
    return {"path": forward + (" / backward " + ("single-read" if reads(x, True) else "three-pass") if step else "")}


def _register(name, layout, training, step):
    def build_reducekit(ctx, inputs):
        forward = _reducekit_forward(_need_reducekit(ctx), training)
        return Impl(_with_grad(forward) if step else forward, _path(inputs[0], training, step))

    def build_torch(ctx, inputs):
        forward = _torch_forward(training)
        return Impl(_with_grad(forward) if step else forward)

    def build_compile(ctx, inputs):
        forward = _torch_forward(training)
        if not step:
            compiled, seconds = compile_fresh(forward, inputs)
            return Impl(compiled, {"compile_s": round(seconds, 2)})
        # The forward is compiled (its backward through AOTAutograd); the step's leaf and the
        # autograd.grad call stay outside, as dynamo does not trace requires_grad_(). Warmed on a
        # leaf that requires grad, as the step calls it.
        x, w, b, rm, rv, _ = inputs
        compiled, seconds = compile_fresh(forward, (x.detach().requires_grad_(), w, b, rm, rv))
        return Impl(_with_grad(compiled), {"compile_s": round(seconds, 2)})

    register(OpSpec(name=name, make_inputs=_make_inputs(layout, step),
                    bytes_moved=_step_bytes if step else _forward_bytes,
                    reference=_reference(training, step),
                    impls={"reducekit": build_reducekit, "torch": build_torch, "torch.compile": build_compile},
                    shapes=list(SHAPES), quick_shapes=list(QUICK), odd_shapes=list(ODD), tolerance=norm_tolerance))


for _name, _training, _step in (("batch_norm", True, False), ("batch_norm_inference", False, False),
                                ("batch_norm_training", True, True)):
    for _layout, _suffix in (("nchw", ""), ("nhwc", "_nhwc")):
        _register(_name + _suffix, _layout, training=_training, step=_step)
