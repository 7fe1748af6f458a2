# SPDX-License-Identifier: Apache-2.0
"""layer_norm and rms_norm (forward, fused residual add, backward) over the last dim, for the
benchmark registry.

Bytes moved: forward x read + y written (the fused residual ops: x and residual read, y and
s written); backward x and dy read + dx written. Per-column parameters, per-row statistics and
dweight/dbias are counted too (small next to the rows when M >> N). weight and bias have x's
dtype, so every peer runs the same problem. Peers: torch eager, torch.compile (fresh per shape)
and, for layer_norm forward, the seed Triton kernel (seed_triton.layer_norm).
"""
from __future__ import annotations

import torch

from peers import compile_fresh, seed_function
from registry import (ROWWISE_GRID, ROWWISE_ODD, ROWWISE_QUICK, BuildContext, Impl, NotApplicable, OpSpec, register,
                      rows_of, rows_tensor, rowwise_sweep_x)

EPS = 1e-5
F = torch.nn.functional


def _elt(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _params(n, dtype, bias=True):
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
    b = (0.1 * torch.randn(n, device="cuda")).to(dtype) if bias else None
    return w, b


def _rows_bytes(shape, dtype, arrays, params):
    m, n = rows_of(shape)
    return arrays * m * n * _elt(dtype) + params * n * _elt(dtype) + 2 * m * 4


def norm_tolerance(dtype):
    # (atol, rtol): a sanity check that no wrong kernel gets timed; tests/python is the strict check.
    # dweight/dbias sum thousands of rows, so rtol carries the check where values are large.
    if dtype == torch.float64:
        return 1e-9, 1e-9
    if dtype == torch.float32:
        return 1e-3, 1e-3
    return 5e-2, 2e-2


def _compiled(eager):
    def build(ctx, inputs):
        compiled, seconds = compile_fresh(eager, inputs)
        return Impl(compiled, {"compile_s": round(seconds, 2)})
    return build


def _need_reducekit(ctx: BuildContext):
    if ctx.reducekit is None:
        raise NotApplicable("reducekit is not built")
    return ctx.reducekit


def _spec(name, make_inputs, bytes_moved, reference, impls):
    register(OpSpec(name=name, make_inputs=make_inputs, bytes_moved=bytes_moved, reference=reference, impls=impls,
                    shapes=list(ROWWISE_GRID), quick_shapes=list(ROWWISE_QUICK), odd_shapes=list(ROWWISE_ODD),
                    sweep_x=rowwise_sweep_x,
                    sweep_label="N (M = 4096)", tolerance=norm_tolerance))


def _ref_norm(kind, x, w, b):
    n = x.shape[-1]
    if kind == "layer_norm":
        return F.layer_norm(x.double(), [n], w.double(), b.double(), EPS)
    y = F.rms_norm(x.double(), [n], w.double(), EPS)
    return y if b is None else y + b.double()


# ----------------------------------------------------------------------------- forward

# rms_norm_bias: rms_norm with its optional bias (torch's F.rms_norm has none: eager adds it
# after, torch.compile fuses the add).
def _register_forward(kind, rms_bias=False):
    layer = kind == "layer_norm"
    with_bias = layer or rms_bias

    def make_inputs(shape, dtype):
        w, b = _params(rows_of(shape)[1], dtype, bias=with_bias)
        return (rows_tensor(shape, dtype), w, b)

    def eager(x, w, b):
        n = x.shape[-1]
        if layer:
            return F.layer_norm(x, [n], w, b, EPS)
        y = F.rms_norm(x, [n], w, EPS)
        return y if b is None else y + b

    def build_reducekit(ctx, inputs):
        rk = _need_reducekit(ctx)
        # the functional API, as users call it (and as F.layer_norm is timed)
        if layer:
            return Impl(lambda x, w, b: rk.layer_norm(x, [x.shape[-1]], w, b, EPS))
        if rms_bias:
            return Impl(lambda x, w, b: rk.rms_norm(x, [x.shape[-1]], w, EPS, bias=b))
        return Impl(lambda x, w, b: rk.rms_norm(x, [x.shape[-1]], w, EPS))

    impls = {"reducekit": build_reducekit, "torch": lambda ctx, inputs: Impl(eager), "torch.compile": _compiled(eager)}
    if layer:
        def build_seed(ctx, inputs):
            fn = seed_function(ctx, "layer_norm")
            if not inputs[0].is_contiguous():
                raise NotApplicable("the seed kernel writes y at x's row stride")
            return Impl(lambda x, w, b: fn(x, w, b, EPS))
        impls["seed-triton"] = build_seed

    _spec(kind + ("_bias" if rms_bias else ""), make_inputs,
          lambda shape, dtype: _rows_bytes(shape, dtype, 2, 2 if with_bias else 1),
          lambda x, w, b: _ref_norm(kind, x, w, b), impls)


def _register_fused(kind):
    layer = kind == "layer_norm"
    name = "add_" + kind

    def make_inputs(shape, dtype):
        w, b = _params(rows_of(shape)[1], dtype, bias=layer)
        return (rows_tensor(shape, dtype), rows_tensor(shape, dtype), w, b)

    def eager(x, r, w, b):
        s = x + r
        n = x.shape[-1]
        return (F.layer_norm(s, [n], w, b, EPS) if layer else F.rms_norm(s, [n], w, EPS)), s

    def build_reducekit(ctx, inputs):
        rk = _need_reducekit(ctx)
        if layer:
            return Impl(lambda x, r, w, b: rk.add_layer_norm(x, r, [x.shape[-1]], w, b, EPS))
        return Impl(lambda x, r, w, b: rk.add_rms_norm(x, r, [x.shape[-1]], w, EPS))

    def reference(x, r, w, b):
        s = (x + r).double()  # s in x's dtype, as the ops define it
        return _ref_norm(kind, s, w, b), s

    _spec(name, make_inputs, lambda shape, dtype: _rows_bytes(shape, dtype, 4, 2 if layer else 1), reference,
          {"reducekit": build_reducekit, "torch": lambda ctx, inputs: Impl(eager), "torch.compile": _compiled(eager)})


# ----------------------------------------------------------------------------- backward

def _register_backward(kind):
    layer = kind == "layer_norm"
    name = kind + "_backward"

    def make_inputs(shape, dtype):
        x = rows_tensor(shape, dtype)
        w, b = _params(rows_of(shape)[1], dtype, bias=layer)
        xf = x.float()
        mean = xf.mean(-1) if layer else torch.zeros(shape[0], device="cuda")
        var = (xf - mean[:, None]).pow(2).mean(-1)
        rstd = torch.rsqrt(var + EPS)
        if dtype == torch.float64:
            mean, rstd = mean.double(), rstd.double()
        return (rows_tensor(shape, dtype), x, w, b, mean, rstd)

    def eager(dy, x, w, b, mean, rstd):
        n = x.shape[-1]
        if layer:
            # torch's own backward kernel, as autograd runs it
            return torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean[:, None], rstd[:, None], w, b,
                                                             [True, True, True])
        # torch has no rms_norm backward kernel: its autograd runs this composite
        acc = rstd.dtype
        xhat = x.to(acc) * rstd[:, None]
        g = dy.to(acc) * w.to(acc)
        dx = rstd[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), (dy.to(acc) * xhat).sum(0).to(w.dtype)

    def build_reducekit(ctx, inputs):
        _need_reducekit(ctx)
        ops = torch.ops.reducekit  # the backward ops have no functional form (nor autograd kernel)
        if layer:
            return Impl(lambda dy, x, w, b, mean, rstd: ops.layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w,
                                                                                True, w.dtype))
        # (dx, dweight, dbias): no bias here, so its [0] placeholder is dropped
        return Impl(lambda dy, x, w, b, mean, rstd: ops.rms_norm_backward(dy, x, [x.shape[-1]], rstd, w, True,
                                                                          w.dtype)[:2])

    def reference(dy, x, w, b, mean, rstd):
        xd, dyd, wd, rd = x.double(), dy.double(), w.double(), rstd.double()[:, None]
        xhat = (xd - mean.double()[:, None]) * rd
        g = dyd * wd
        if layer:
            dx = rd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
            return dx, (dyd * xhat).sum(0), dyd.sum(0)
        dx = rd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx, (dyd * xhat).sum(0)

    _spec(name, make_inputs, lambda shape, dtype: _rows_bytes(shape, dtype, 3, 3 if layer else 2), reference,
          {"reducekit": build_reducekit, "torch": lambda ctx, inputs: Impl(eager), "torch.compile": _compiled(eager)})


for _kind in ("layer_norm", "rms_norm"):
    _register_forward(_kind)
    _register_fused(_kind)
    _register_backward(_kind)
_register_forward("rms_norm", rms_bias=True)
