# SPDX-License-Identifier: Apache-2.0
"""The reduction family for the benchmark registry: sum, mean, amax, argmax, logsumexp and var_mean,
each on the three canonical paths:

    <op>_row   the standard grid reduced over its last dim   (M outputs of N elements)
    <op>_col   the same shapes reduced over dim 0            (N outputs of M elements, coalesced)
    <op>_all   1-d tensors of 2^16 .. 2^28 elements, every element into one output

Bytes moved = the input read once + the outputs written once. The seed Triton kernels have a
block-reduce-plus-atomic sum over every element (seed_triton.sum_all), a peer for sum_all.
"""
from __future__ import annotations

import math

import torch

from peers import build_seed_sum_all, compile_fresh
from registry import (ROWWISE_GRID, ROWWISE_ODD, ROWWISE_QUICK, BuildContext, Impl, NotApplicable, OpSpec, register,
                      rows_of, rows_tensor, rowwise_sweep_x)

ALL_GRID = [(2**16,), (2**20,), (2**24,), (2**26,), (2**28,)]
ALL_QUICK = [(2**20,), (2**28,)]
COLUMN_QUICK = [(4096, 128), (4096, 1024), (4096, 32768), (32768, 4096), (256, 262144)]

# op -> torch eager function of (x, dim)
OPS = {
    "sum": lambda x, dim: torch.sum(x, dim),
    "mean": lambda x, dim: torch.mean(x, dim),
    "amax": lambda x, dim: torch.amax(x, dim if dim is not None else ()),
    "argmax": lambda x, dim: torch.argmax(x, dim),
    "logsumexp": lambda x, dim: torch.logsumexp(x, dim if dim is not None else list(range(x.dim()))),
    "var_mean": lambda x, dim: torch.var_mean(x, dim),
}
PATHS = {  # path -> (dim, shapes, quick shapes, sweep_x, sweep label)
    "row": (-1, ROWWISE_GRID, ROWWISE_QUICK, rowwise_sweep_x, "N (M = 4096), reduce N"),
    "col": (0, ROWWISE_GRID, COLUMN_QUICK, rowwise_sweep_x, "N (M = 4096), reduce M"),
    "all": (None, ALL_GRID, ALL_QUICK, lambda shape: int(math.prod(shape)), "elements"),
}


def _make_inputs(shape, dtype):
    return (rows_tensor(shape, dtype),)


def _bytes_for(op, dim):
    def bytes_moved(shape, dtype):
        elem = torch.empty((), dtype=dtype).element_size()
        dims = rows_of(shape) if len(shape) == 3 else shape  # (M, N, S): M x N rows at stride S
        outputs = 1 if dim is None else math.prod(s for d, s in enumerate(dims) if d != dim % len(dims))
        out_bytes = {"argmax": 8, "var_mean": 2 * elem}.get(op, elem)
        return math.prod(dims) * elem + outputs * out_bytes
    return bytes_moved


def _tolerance_for(op):
    def tolerance(dtype):
        # (atol, rtol): a sanity check that no wrong kernel gets timed; tests/python is the strict check.
        # Sums of up to 2^28 randn values are ~1e4 with float32 rounding near 1e-3.
        if op == "argmax":
            return 0.5, 0.0
        if dtype == torch.float64:
            return 1e-9, 1e-10
        if dtype == torch.float32:
            return 1e-2, 1e-4
        return 5e-2, 2e-2  # fp16 / bf16 outputs: a couple of units in the last place
    return tolerance


def _register(op, path):
    torch_fn = OPS[op]
    dim, shapes, quick, sweep_x, label = PATHS[path]
    dims = None if dim is None else (dim if op == "argmax" else [dim])

    def eager(x):
        return torch_fn(x, dim)

    def build_reducekit(ctx: BuildContext, inputs):
        if ctx.reducekit is None:
            raise NotApplicable("reducekit is not built")
        # the functional API, as users call it (and as torch.sum is timed)
        fn = getattr(ctx.reducekit, op)
        return Impl(lambda x: fn(x, dims))

    def build_torch(ctx, inputs):
        return Impl(eager)

    def build_compile(ctx, inputs):
        compiled, seconds = compile_fresh(eager, inputs)
        return Impl(compiled, {"compile_s": round(seconds, 2)})

    impls = {"reducekit": build_reducekit, "torch": build_torch, "torch.compile": build_compile}
    if op == "sum" and path == "all":
        impls["seed-triton"] = build_seed_sum_all

    register(OpSpec(
        name=f"{op}_{path}",
        make_inputs=_make_inputs,
        bytes_moved=_bytes_for(op, dim),
        reference=lambda x: torch_fn(x.double(), dim),
        impls=impls,
        shapes=list(shapes),
        quick_shapes=list(quick),
        odd_shapes=list(ROWWISE_ODD) if path != "all" else [],
        sweep_x=sweep_x,
        sweep_label=label,
        tolerance=_tolerance_for(op),
    ))


for _op in OPS:
    for _path in PATHS:
        _register(_op, _path)
