# SPDX-License-Identifier: Apache-2.0
"""softmax and log_softmax over the last dim, and over dim 1 of contiguous tensors (the column
path, read in place), for the benchmark registry."""
from __future__ import annotations

import math

import torch

from peers import compile_fresh
from registry import (ROWWISE_GRID, ROWWISE_ODD, ROWWISE_QUICK, BuildContext, Impl, NotApplicable, OpSpec, register,
                      rows_of, rows_tensor, rowwise_sweep_x)

# The seed Triton kernels hold a whole row in one program's registers; past this they
# fail to compile or spill into uselessness, so they are not run there.
SEED_MAX_N = 65536


def _make_inputs(shape, dtype):
    return (rows_tensor(shape, dtype),)


def _bytes_moved(shape, dtype):
    # x read once, y written once
    return 2 * math.prod(rows_of(shape)) * torch.empty((), dtype=dtype).element_size()


def _tolerance_for(op_name):
    def tolerance(dtype):
        # (atol, rtol): a sanity check that no wrong kernel gets timed; tests/python is the strict check.
        # softmax values can be ~1e-6 (N = 1M), so its atol is tiny; log_softmax values are O(10).
        atol = {"softmax": 1e-9, "log_softmax": 1e-6}[op_name]
        if dtype == torch.float64:
            return atol * 1e-6, 1e-10
        if dtype == torch.float32:
            return atol, 2e-5
        return max(atol, 1e-6), 1e-2  # fp16 / bf16: a couple of units in the last place
    return tolerance


def _register(name, torch_fn, seed_name):
    def eager(x):
        return torch_fn(x, -1)

    def build_reducekit(ctx: BuildContext, inputs):
        if ctx.reducekit is None:
            raise NotApplicable("reducekit is not built")
        # the functional API, as users call it (and as torch.softmax is timed)
        fn = getattr(ctx.reducekit, name)
        return Impl(lambda x: fn(x, -1))

    def build_torch(ctx, inputs):
        return Impl(eager)

    def build_compile(ctx, inputs):
        compiled, seconds = compile_fresh(eager, inputs)
        return Impl(compiled, {"compile_s": round(seconds, 2)})

    def build_seed(ctx, inputs):
        fn = getattr(ctx.seed, seed_name, None) if ctx.seed is not None else None
        if fn is None:
            raise NotApplicable("seed_triton.py not loaded" if ctx.seed is None else f"no seed_triton.{seed_name}")
        (x,) = inputs
        n = x.shape[-1]
        if n > SEED_MAX_N:
            raise NotApplicable(f"N={n} > {SEED_MAX_N}: the seed kernel keeps the row in registers")
        if x.dim() == 2:
            return Impl(fn)
        return Impl(lambda t: fn(t.reshape(-1, n)).view(t.shape))

    register(OpSpec(
        name=name,
        make_inputs=_make_inputs,
        bytes_moved=_bytes_moved,
        reference=lambda x: torch_fn(x.double(), -1),
        impls={"reducekit": build_reducekit, "torch": build_torch, "torch.compile": build_compile,
               "seed-triton": build_seed},
        shapes=list(ROWWISE_GRID),
        quick_shapes=list(ROWWISE_QUICK),
        odd_shapes=list(ROWWISE_ODD),
        sweep_x=rowwise_sweep_x,
        sweep_label="N (M = 4096)",
        tolerance=_tolerance_for(name),
    ))


_register("softmax", torch.softmax, "softmax")
_register("log_softmax", torch.log_softmax, "log_softmax")


# Over dim 1 of a contiguous tensor: NCHW class maps (K = 19, 150, 1000 classes) and a
# [batch, K, inner] sequence layout. K x inner columns, read in place by reducekit.
DIM1_SHAPES = [(32, 19, 128, 128), (32, 150, 128, 128), (32, 1000, 64, 64), (64, 4096, 256)]
DIM1_QUICK = [(32, 150, 128, 128), (64, 4096, 256)]
# inner extents no vector width divides (7 x 7, 127 x 127): the scalar path, beside padded twins
DIM1_ODD = [(256, 1000, 7, 7), (256, 1000, 8, 8), (32, 150, 127, 127), (32, 150, 128, 128)]


def _dim1_inputs(shape, dtype):
    return (torch.randn(tuple(shape), device="cuda", dtype=dtype),)


def _dim1_bytes(shape, dtype):
    # x read once, y written once
    return 2 * math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _register_dim1(name, base, torch_fn):
    def eager(x):
        return torch_fn(x, 1)

    def build_reducekit(ctx: BuildContext, inputs):
        if ctx.reducekit is None:
            raise NotApplicable("reducekit is not built")
        fn = getattr(ctx.reducekit, base)
        return Impl(lambda x: fn(x, 1))

    def build_torch(ctx, inputs):
        return Impl(eager)

    def build_compile(ctx, inputs):
        compiled, seconds = compile_fresh(eager, inputs)
        return Impl(compiled, {"compile_s": round(seconds, 2)})

    register(OpSpec(
        name=name,
        make_inputs=_dim1_inputs,
        bytes_moved=_dim1_bytes,
        reference=lambda x: torch_fn(x.double(), 1),
        impls={"reducekit": build_reducekit, "torch": build_torch, "torch.compile": build_compile},
        shapes=list(DIM1_SHAPES),
        quick_shapes=list(DIM1_QUICK),
        odd_shapes=list(DIM1_ODD),
        sweep_label="shape (softmax over dim 1)",
        tolerance=_tolerance_for(base),
    ))


_register_dim1("softmax_dim1", "softmax", torch.softmax)
_register_dim1("log_softmax_dim1", "log_softmax", torch.log_softmax)


# The backwards, over the last dim and over dim 1: y (the forward's output, in the input's dtype)
# and dy read once, dx written once. torch's peer is its own backward kernel, as autograd runs it.
# Run by name only (--ops softmax_backward_dim1, ...).
def _register_backward(name, base, dim, shapes, quick, odd, make_x):
    log = base == "log_softmax"
    forward = torch.log_softmax if log else torch.softmax
    aten_backward = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data

    def make_inputs(shape, dtype):
        x = make_x(shape, dtype)
        return forward(x.float(), dim).to(dtype), torch.randn_like(x)

    def bytes_moved(shape, dtype):
        return 3 * math.prod(rows_of(shape) if dim == -1 else shape) * torch.empty((), dtype=dtype).element_size()

    def reference(y, dy):
        y, dy = y.double(), dy.double()
        if log:
            return dy - y.exp() * dy.sum(dim, keepdim=True)
        return y * (dy - (dy * y).sum(dim, keepdim=True))

    def eager(y, dy):
        return aten_backward(dy, y, dim, y.dtype)

    def build_reducekit(ctx: BuildContext, inputs):
        if ctx.reducekit is None:
            raise NotApplicable("reducekit is not built")
        op = getattr(torch.ops.reducekit, base + "_backward")  # no functional form: autograd calls it
        return Impl(lambda y, dy: op(y, dy, dim))

    def build_compile(ctx, inputs):
        compiled, seconds = compile_fresh(eager, inputs)
        return Impl(compiled, {"compile_s": round(seconds, 2)})

    def tolerance(dtype):
        # a sanity check that no wrong kernel gets timed (dx is a difference of O(1) terms)
        return {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-4)}.get(dtype, (2e-2, 2e-2))

    register(OpSpec(
        name=name, make_inputs=make_inputs, bytes_moved=bytes_moved, reference=reference,
        impls={"reducekit": build_reducekit, "torch": lambda ctx, inputs: Impl(eager), "torch.compile": build_compile},
        shapes=list(shapes), quick_shapes=list(quick), odd_shapes=list(odd),
        sweep_x=rowwise_sweep_x if dim == -1 else (lambda shape: None),
        sweep_label="N (M = 4096)" if dim == -1 else "shape (softmax over dim 1)", tolerance=tolerance,
        in_default_run=False,
    ))


for _base in ("softmax", "log_softmax"):
    _register_backward(_base + "_backward", _base, -1, ROWWISE_GRID, ROWWISE_QUICK, ROWWISE_ODD, rows_tensor)
    _register_backward(_base + "_backward_dim1", _base, 1, DIM1_SHAPES, DIM1_QUICK, DIM1_ODD,
                       lambda shape, dtype: _dim1_inputs(shape, dtype)[0])
