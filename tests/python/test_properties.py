# SPDX-License-Identifier: Apache-2.0
"""Property-based tests (Hypothesis): reducekit against torch in float64 on random inputs.

Each example draws a tensor and an op's arguments, runs reducekit and checks it against torch on
the same values cast to float64, with the tolerances and comparison helpers of the per-family
modules (imported from them, not copied): test_reduce.check, test_softmax.check and
assert_grad_close, tolerance.assert_close with test_norm's scales, test_batch_norm.compare_forward,
test_cross_entropy's TOL and assert_grad_close. Every check also asserts the output's dtype and
shape equal torch's, NaN exactly where the oracle has NaN, and infinities equal.

Inputs (`tensors` below):
  rank 1..8; extents mostly from {1, 2, 3, 5, 7, 11, 13, 31, 37}, sometimes a long prime
  (127 .. 65521), in 1 of 20 examples one extent 0; at most 2^16 elements, so a case takes
  milliseconds.
  views: contiguous, stepped slices from an offset base (steps 1..3), permuted (transposed)
  strides, a dim expanded from 1 (stride 0), or slices of a permuted base.
  dtypes float32, float16, bfloat16, float64.
  values: randn; 1e4 * randn (exp overflows; float16 clamped to its range); float16 only, values
  of magnitude 32752..65504; 1e4 + randn (not float16, as test_reduce: no digits left); constant;
  prod gets 1 + randn/64 (test_reduce.kind_for: long products of randn over/underflow part-way).
  In 1 of 4 examples +-inf and NaN are sprinkled in, or a random share of -inf (softmax padding,
  all -inf rows).
  Inputs rejected by design are asserted to raise (amax/amin/argmax/argmin of an empty set:
  an error naming the dim; batch_norm training on one value a channel: ValueError); argmax/argmin
  are drawn with one dim (or None), as torch's take.

Budget: the profile's max_examples is a unit; each test runs `share` units (BUDGET below, 25
units in all). Default profile: 500 a unit, 12,500 cases a run. At about 3 ms for a forward case
and 6 ms for a backward one on an H200 (4000 + 1500 + 1500 + 1000 + 1500 + 500 + 1000 forward-ish
cases at 3 ms = 33 s, 1500 + 1000 + 1000 backward cases at 6 ms = 21 s) plus ~1-2 ms of Hypothesis
generation a case (12-25 s), about 65-80 s. REDUCEKIT_PROPERTY_PROFILE=long: 10x, 125,000 cases,
about 12 minutes. Fixed seed (derandomize), no example database, deadline off. A failure prints
the shrunk example; keep it as a regular test (or an @example) once fixed.
conftest.py skips this module, with the reason, where torch, a GPU or a built reducekit is missing.
"""
import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import reducekit
import test_batch_norm as bn_tests
import test_cross_entropy as ce_tests
import test_norm as norm_tests
import test_reduce as reduce_tests
import test_softmax as softmax_tests
import tolerance

DEV = "cuda"
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HALF = (torch.float16, torch.bfloat16)

_COMMON = dict(derandomize=True, database=None, deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
settings.register_profile("reducekit-default", max_examples=500, **_COMMON)
settings.register_profile("reducekit-long", max_examples=5000, **_COMMON)
PROFILE = settings.get_profile("reducekit-" + os.environ.get("REDUCEKIT_PROPERTY_PROFILE", "default"))
BUDGET = dict(reduce=8, reduce_backward=3, softmax=3, softmax_backward=2, norm=3, norm_backward=2,
              deterministic=2, batch_norm=1, cross_entropy=1)  # units of PROFILE.max_examples; 25 in all


def budget(test):
    """The profile's settings (not loaded globally: other modules' Hypothesis tests keep theirs)."""
    return settings(PROFILE, max_examples=PROFILE.max_examples * BUDGET[test])


# ----------------------------------------------------------------------------- inputs

SMALL = [1, 2, 3, 5, 7, 11, 13, 31, 37]
LONG = [127, 509, 1021, 2053, 4099, 16381, 65521]
MAX_NUMEL = 2**16
KINDS = ["randn", "large", "near_max", "offset", "constant"]


@st.composite
def shapes(draw, min_rank=1, max_rank=8, zero=True):
    rank = draw(st.integers(min_rank, max_rank), label="rank")
    sizes = [draw(st.sampled_from(SMALL * 3 + LONG)) for _ in range(rank)]
    while math.prod(sizes) > MAX_NUMEL:  # the largest extent steps down the lists until it fits
        i = sizes.index(max(sizes))
        ladder = sorted(SMALL + LONG)
        sizes[i] = ladder[ladder.index(sizes[i]) - 1]
    if zero and draw(st.integers(0, 19)) == 0:
        sizes[draw(st.integers(0, rank - 1))] = 0
    return sizes


def _fill(kind, shape, dtype, gen):
    """float64 values of `kind` in `shape`, to be rounded to dtype."""
    if kind == "constant":
        return torch.full(shape, 100 * torch.randn((), generator=gen, device=DEV, dtype=torch.float64).item(),
                          device=DEV, dtype=torch.float64)
    g = torch.randn(shape, generator=gen, device=DEV, dtype=torch.float64)
    big = torch.finfo(dtype).max
    if kind == "large":
        return (1e4 * g).clamp(-big, big)
    if kind == "near_max":  # float16 only: 32752 .. 65504 with random signs
        u = torch.rand(shape, generator=gen, device=DEV, dtype=torch.float64)
        return torch.where(g < 0, -1.0, 1.0) * big * (0.5 + u / 2)
    if kind == "offset":
        return 1e4 + g
    if kind == "near_one":
        return 1 + g / 64
    return g


@st.composite
def tensors(draw, dtypes=DTYPES, kinds=KINDS, specials=True, sizes=None, views=True):
    """(x, description): a tensor of a drawn shape, dtype, value kind and view."""
    sizes = sizes if sizes is not None else draw(shapes())
    rank = len(sizes)
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    kind = draw(st.sampled_from([k for k in kinds if _kind_fits(k, dtype)]), label="kind")
    view = draw(st.sampled_from(["contiguous", "sliced", "permuted", "expanded", "permuted+sliced"]
                                if views else ["contiguous"]), label="view")
    perm = draw(st.permutations(range(rank))) if "permuted" in view else list(range(rank))
    starts, steps = [0] * rank, [1] * rank
    if "sliced" in view:
        starts = [draw(st.integers(0, 1)) for _ in range(rank)]
        steps = [draw(st.integers(1, 3)) if s > 1 and s * 3 <= MAX_NUMEL else 1 for s in sizes]
    expanded = {draw(st.integers(0, rank - 1))} if view == "expanded" else set()
    base_ext = [1 if d in expanded else starts[d] + (sizes[d] - 1) * steps[d] + 1 if sizes[d] else starts[d]
                for d in range(rank)]
    while math.prod(base_ext) > 4 * MAX_NUMEL and (max(steps) > 1 or max(starts) > 0):
        d = max(range(rank), key=lambda i: (steps[i], starts[i]))  # undo slicing: the base is too large
        steps[d], starts[d] = 1, (0 if steps[d] == 1 else starts[d])
        base_ext[d] = 1 if d in expanded else starts[d] + sizes[d]
    gen = torch.Generator(device=DEV).manual_seed(draw(st.integers(0, 2**31 - 1), label="seed"))
    base = _fill(kind, [base_ext[p] for p in perm], dtype, gen)
    special = draw(st.sampled_from(["none"] * 3 + ["sprinkled", "neg_inf_share"])) if specials else "none"
    if special == "sprinkled" and base.numel():
        flat = base.view(-1)
        at = torch.randint(0, flat.numel(), (draw(st.integers(1, 4)),), generator=gen, device=DEV)
        flat[at] = torch.tensor([math.inf, -math.inf, math.nan, -math.inf], device=DEV,
                                dtype=torch.float64)[:at.numel()]
    elif special == "neg_inf_share":
        share = draw(st.sampled_from([0.25, 0.9]))
        base = base.masked_fill(torch.rand(base.shape, generator=gen, device=DEV, dtype=torch.float64) < share,
                                -math.inf)
    x = base.to(dtype).permute([perm.index(d) for d in range(rank)])
    x = x[tuple(slice(starts[d], starts[d] + (sizes[d] - 1) * steps[d] + 1 if sizes[d] else starts[d], steps[d])
                for d in range(rank))]
    x = x.expand(sizes)
    assert list(x.shape) == sizes
    return x, f"{view} {kind}/{special} {dtype} strides {x.stride()}"


def _kind_fits(kind, dtype):
    if kind == "near_max":
        return dtype == torch.float16
    if kind == "offset":
        return dtype != torch.float16
    return True


@st.composite
def dims(draw, rank, single=False):
    """None, one dim, or (not single) a tuple of distinct dims, each maybe negative."""
    form = draw(st.sampled_from(["none", "one", "one"] if single else ["none", "one", "tuple", "tuple"]))
    if form == "none":
        return None
    chosen = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=1 if form == "one" else rank,
                           unique=True))
    chosen = [d - rank if draw(st.booleans()) else d for d in chosen]
    return chosen[0] if form == "one" else tuple(chosen)


def _wrapped(rank, dim):
    """The reduced dims, non-negative and sorted."""
    return list(range(rank)) if dim is None else sorted(d % rank for d in ([dim] if isinstance(dim, int) else dim))


def _count(x, dim):
    return math.prod(x.shape[d] for d in _wrapped(x.dim(), dim))


def _spread(t, x, reduced, keepdim):
    """An output-shaped tensor broadcast back over x's reduced dims."""
    if not keepdim:
        for d in reduced:
            t = t.unsqueeze(d)
    return t.expand(x.shape)


def _check_non_finite(out, ref, what):
    """What tolerance.assert_close leaves out: infinities equal where the oracle has them."""
    inf = ref.isinf()
    differ = inf & (out.double() != ref)
    assert not bool(differ.any()), f"{what}: infinities differ at {differ.nonzero()[:4].tolist()}: got " \
                                   f"{out.double()[differ][:4].tolist()}, want {ref[differ][:4].tolist()}"


def _grad_close(out, ref, dtype, scale, what):
    """tolerance.assert_close for gradients computed by torch ops in x's dtype (the reductions'
    backward formulas, python/csrc/reduce_autograd.cpp; var and std's compute in float32 for 16-bit x
    and round once, the others in x's dtype): intermediates may round at the dtype's epsilon, not
    float32's, so the absolute term is 4 eps(dtype) * scale where that is larger.
    A value within a few units of the dtype's largest (or past it) may round to inf, as torch's."""
    assert out is not None, f"{what}: no gradient"
    edge = torch.finfo(dtype).max * (1 - 16 * torch.finfo(dtype).eps)
    overflowed = ref.isfinite() & (ref.abs() > edge) & (out.double() == ref.sign() * math.inf)
    ref = torch.where(overflowed, out.double(), ref)
    _check_non_finite(out, ref, what)
    ratio = max(1.0, 4 * torch.finfo(dtype).eps / tolerance.math_eps(dtype))
    tolerance.assert_close(out, ref, dtype, scale * ratio, what)


# ----------------------------------------------------------------------------- reductions

REDUCE_OPS = reduce_tests.OPS
EMPTY_SET_ERRORS = reduce_tests.ARG_OPS + reduce_tests.EXACT_OPS


@budget("reduce")
@given(data=st.data())
def test_reduce(data):
    op = data.draw(st.sampled_from(REDUCE_OPS), label="op")
    kinds = ["near_one", "constant"] if op == "prod" else KINDS
    x, what = data.draw(tensors(kinds=kinds), label="x")
    dim = data.draw(dims(x.dim(), single=op in reduce_tests.ARG_OPS), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    correction = data.draw(st.sampled_from([1, 0]), label="correction")
    if op in EMPTY_SET_ERRORS and _count(x, dim) == 0:
        with pytest.raises(reduce_tests.ERRORS, match=r"dim"):
            reduce_tests.rk_call(op, x, dim, keepdim)
        return
    reduce_tests.check(op, x, dim, keepdim, correction)


GRAD_REDUCE_OPS = ["sum", "mean", "var", "std", "logsumexp"]


@budget("reduce_backward")
@given(data=st.data())
def test_reduce_backward(data):
    op = data.draw(st.sampled_from(GRAD_REDUCE_OPS), label="op")
    x, what = data.draw(tensors(), label="x")
    dim = data.draw(dims(x.dim()), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    dtype, n = x.dtype, _count(x, dim)
    xa, xb = x.detach().clone().requires_grad_(), x.detach().double().requires_grad_()
    ya, yb = reduce_tests.rk_call(op, xa, dim, keepdim), reduce_tests.torch_call(op, xb, dim, keepdim)
    g = torch.randn(ya.shape, device=DEV, dtype=torch.float64).to(dtype)
    ya.backward(g)
    yb.backward(g.double())
    ref = xb.grad
    dd = _wrapped(x.dim(), dim)
    spread = lambda t: _spread(t.double(), x, dd, keepdim)  # noqa: E731

    xd, gx = x.double(), spread(g)
    if op == "sum":
        scale = gx.abs()
    elif op == "mean":
        scale = gx.abs() / max(n, 1)
    elif op == "logsumexp":  # exp(x - y) from the saved y: y's error and x - y's rounding
        y = spread(yb.detach())
        scale = 2 * ref.abs() * (1 + y.abs() + (xd - y).abs())
    else:  # 2 g (x - mean) / (n - correction), std's g / (2 std) first; either product may be subnormal
        # x - mean carries the mean's rounding, which follows the set's mean |x| (not |mean|, which
        # may be near 0), so an element near the mean still gets that error.
        mean = xd.mean(dd, keepdim=True) if n else xd
        mean_abs = xd.abs().mean(dd, keepdim=True) if n else xd.abs()
        factor = 2 * gx.abs() / max(abs(n - 1), 1)
        if op == "std":
            factor = factor / spread(yb.detach()).clamp_min(1e-300)
        scale = (xd.abs() + mean.abs() + mean_abs) * (factor + 2 * torch.finfo(dtype).tiny)
    _grad_close(xa.grad, ref, dtype, scale, f"{op} dx ({what}, dim {dim}, keepdim {keepdim})")


# ----------------------------------------------------------------------------- softmax

@budget("softmax")
@given(data=st.data())
def test_softmax(data):
    op = data.draw(st.sampled_from(softmax_tests.OPS), label="op")
    x, what = data.draw(tensors(), label="x")
    dim = data.draw(st.integers(-x.dim(), x.dim() - 1), label="dim")
    softmax_tests.check(op, x, dim)


@budget("softmax_backward")
@given(data=st.data())
def test_softmax_backward(data):
    op = data.draw(st.sampled_from(softmax_tests.OPS), label="op")
    x, what = data.draw(tensors(), label="x")
    dim = data.draw(st.integers(-x.dim(), x.dim() - 1), label="dim")
    dtype = x.dtype
    xa = x.detach().clone().requires_grad_()
    y = softmax_tests.RK[op](xa, dim=dim)
    g = torch.randn(x.shape, device=DEV, dtype=torch.float64).to(dtype)
    y.backward(g)
    assert xa.grad is not None and xa.grad.dtype == dtype and xa.grad.shape == x.shape, \
        f"{op} dx: {None if xa.grad is None else (xa.grad.dtype, tuple(xa.grad.shape))} for x {dtype} " \
        f"{tuple(x.shape)} ({what})"
    # as test_softmax.test_backward: 16-bit gradients start from the saved 16-bit y, as torch's do
    if dtype in HALF:
        y64, rtol = y.detach().double(), 2.0**-7
    else:
        y64, rtol = softmax_tests.reference(op, x, dim), (2e-5 if dtype == torch.float32 else 1e-12)
    ref = softmax_tests.grad_formula(op, y64, g, dim)
    nan_differs = xa.grad.isnan() != ref.isnan()
    assert not bool(nan_differs.any()), f"{op} dx: NaN pattern differs ({what}) at " \
        f"{nan_differs.nonzero()[:4].tolist()}: got {xa.grad[nan_differs][:4].tolist()}, " \
        f"want {ref[nan_differs][:4].tolist()}"
    _check_non_finite(xa.grad, ref, f"{op} dx ({what})")
    finite = ref.isfinite()
    softmax_tests.assert_grad_close(op, torch.where(finite, xa.grad, 0).to(dtype), torch.where(finite, ref, 0),
                                    torch.where(finite, y64, 0), g, dim, rtol)


# ----------------------------------------------------------------------------- norms

NORM_KINDS = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]


@st.composite
def norm_cases(draw, specials=True):
    kind = draw(st.sampled_from(NORM_KINDS), label="kind")
    x, what = draw(tensors(specials=specials), label="x")
    k = draw(st.integers(1, min(3, x.dim())), label="normalized dims")
    shape = list(x.shape[x.dim() - k:])
    pdt = draw(st.sampled_from(norm_tests.param_dtypes(x.dtype)), label="param dtype")
    gen = torch.Generator(device=DEV).manual_seed(draw(st.integers(0, 2**31 - 1)))
    w = (1 + 0.5 * torch.randn(shape, generator=gen, device=DEV)).to(pdt) if draw(st.booleans()) else None
    bias = "layer" in kind and draw(st.booleans())
    b = torch.randn(shape, generator=gen, device=DEV).to(pdt) if bias else None
    r = torch.randn(x.shape, generator=gen, device=DEV).to(x.dtype) if kind.startswith("add_") else None
    return kind, x, shape, w, b, r, what


def run_norm(kind, x, shape, w, b, r):
    """(y, s): s = x + residual for the fused forms, x otherwise."""
    if kind == "layer_norm":
        return reducekit.layer_norm(x, shape, w, b, 1e-5), x
    if kind == "rms_norm":
        return reducekit.rms_norm(x, shape, w, 1e-5), x
    if kind == "add_layer_norm":
        return reducekit.add_layer_norm(x, r, shape, w, b, 1e-5)
    return reducekit.add_rms_norm(x, r, shape, w, 1e-5)


@budget("norm")
@given(case=norm_cases())
def test_norm(case):
    kind, x, shape, w, b, r, what = case
    y, s = run_norm(kind, x, shape, w, b, r)
    if r is not None:
        want = x + r
        assert s.dtype == want.dtype and s.shape == want.shape, \
            f"s: {s.dtype} {tuple(s.shape)}, x + residual: {want.dtype} {tuple(want.shape)} ({what})"
        differ = (s.isnan() != want.isnan()) | (s.nan_to_num() != want.nan_to_num())
        assert not bool(differ.any()), f"s must be x + residual in x's dtype ({what}): at " \
            f"{differ.nonzero()[:4].tolist()} got {s[differ][:4].tolist()}, want {want[differ][:4].tolist()}"
        x = want
    ref = norm_tests.torch_norm(kind.removeprefix("add_"), x, shape, w, b, 1e-5)
    _check_non_finite(y, ref, f"{kind} ({what})")
    tolerance.assert_close(y, ref, x.dtype, norm_tests.y_scale(x, shape, w, b, "layer" in kind),
                           f"{kind} ({what}, over {shape})")


@budget("norm_backward")
@given(case=norm_cases())
def test_norm_backward(case):
    kind, x, shape, w, b, r, what = case
    layer = "layer" in kind
    dy = torch.randn(x.shape, device=DEV, dtype=torch.float64).to(x.dtype)
    got = norm_tests.grads(lambda x, r, w, b: run_norm(kind, x, shape, w, b, r), [x, r, w, b], dy)
    # the fused forms normalize s = x + residual rounded to x's dtype; ds is both dx and dresidual
    s = (x + r if r is not None else x).double()
    ref = norm_tests.grads(lambda s, w, b: norm_tests.torch_norm(kind.removeprefix("add_"), s, shape, w, b, 1e-5),
                           [s, w.double() if w is not None else None, b.double() if b is not None else None],
                           dy.double())
    ref = [ref[0], ref[0], ref[1], ref[2]]
    # test_norm.check_backward's scales, over any normalized_shape and leading dims
    nd = tuple(range(x.dim() - len(shape), x.dim()))
    lead = tuple(range(x.dim() - len(shape)))
    centered = s - s.mean(nd, keepdim=True) if layer and s.numel() else s
    rstd = 1 / (centered.pow(2).mean(nd, keepdim=True) + 1e-5).sqrt() if s.numel() else s
    gw = dy.double().abs() * (w.double().abs() if w is not None else 1)
    if s.numel():
        dx_scale = rstd * (gw.amax(nd, keepdim=True) + (s.abs() * rstd).amax(nd, keepdim=True)
                           * (1 + gw.mean(nd, keepdim=True)))
    else:
        dx_scale = s
    for name, i in (("dx", 0), ("dresidual", 1)):
        if i == 0 or r is not None:
            _check_non_finite(got[i], ref[i], f"{kind} {name}")
            tolerance.assert_close(got[i], ref[i], x.dtype, dx_scale, f"{kind} {name} ({what}, over {shape})")
    col = (dy.double().abs() * s.abs() * rstd).sum(lead) if s.numel() else torch.zeros(shape, device=DEV)
    for name, i, t, sc in (("dweight", 2, w, col), ("dbias", 3, b, dy.double().abs().sum(lead))):
        if t is not None:
            _check_non_finite(got[i], ref[i], f"{kind} {name}")
            tolerance.assert_close(got[i], ref[i], t.dtype, sc, f"{kind} {name} ({what}, over {shape})")


# ----------------------------------------------------------------------------- determinism

def _bits(out):
    """Every output's bytes as integers: NaN payloads and signed zeros count, NaN == NaN."""
    outs = out if isinstance(out, tuple) else (out,)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return [o.contiguous().view(ints[o.element_size()]) for o in outs]


@budget("deterministic")
@given(data=st.data())
def test_deterministic(data):
    family = data.draw(st.sampled_from(["reduce", "softmax", "norm"]), label="family")
    if family == "norm":
        kind, x, shape, w, b, r, what = data.draw(norm_cases(), label="case")
        call = lambda: run_norm(kind, x, shape, w, b, r)  # noqa: E731
    else:
        x, what = data.draw(tensors(), label="x")
        if family == "softmax":
            op, dim = data.draw(st.sampled_from(softmax_tests.OPS)), data.draw(st.integers(-x.dim(), x.dim() - 1))
            call = lambda: softmax_tests.RK[op](x, dim=dim)  # noqa: E731
        else:
            op = data.draw(st.sampled_from(REDUCE_OPS))
            dim = data.draw(dims(x.dim(), single=op in reduce_tests.ARG_OPS))
            op = "sum" if op in EMPTY_SET_ERRORS and _count(x, dim) == 0 else op  # those raise (test_reduce)
            call = lambda: reduce_tests.rk_call(op, x, dim)  # noqa: E731
    first = _bits(call())
    reducekit.softmax(torch.randn(3, 1001, device=DEV), -1)  # other work in between must not matter
    second = _bits(call())
    for k, (a, b) in enumerate(zip(first, second)):
        differ = a != b
        assert not bool(differ.any()), f"two runs differ ({family}, {what}), output {k}: {int(differ.sum())} of " \
            f"{differ.numel()} elements, first at flat index {int(differ.reshape(-1).nonzero()[0])}"


# ----------------------------------------------------------------------------- batch_norm, cross_entropy

@budget("batch_norm")
@given(data=st.data())
def test_batch_norm(data):
    sizes = data.draw(shapes(min_rank=2, max_rank=5, zero=False), label="shape")
    training = data.draw(st.booleans(), label="training")
    layout = data.draw(st.sampled_from(["contiguous", "channels_last", "view"]), label="layout")
    # eval normalizes with running statistics near (0, 1): 1e4-scale 16-bit inputs would overflow y
    kinds = KINDS if training else ["randn", "offset", "constant"]
    x, what = data.draw(tensors(sizes=sizes, kinds=kinds, views=layout == "view", specials=False), label="x")
    if layout == "channels_last" and bn_tests.channels_last_format(x.dim()) is not None:
        x = x.contiguous(memory_format=bn_tests.channels_last_format(x.dim()))
    pdt = bn_tests.param_dtype(x.dtype)
    affine, running = data.draw(st.booleans(), label="affine"), data.draw(st.booleans(), label="running")
    w, b = bn_tests.make_params(sizes[1], pdt, affine, affine)
    rm, rv = bn_tests.make_running(sizes[1], pdt) if running or not training else (None, None)
    momentum = data.draw(st.sampled_from([0.1, 0.5]), label="momentum")
    if training and x.numel() // sizes[1] == 1:  # by design, as torch: statistics need two values
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            reducekit.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum)
        return
    bn_tests.compare_forward(x, training, w, b, rm, rv, momentum, check_format=layout != "view")


@budget("cross_entropy")
@given(data=st.data())
def test_cross_entropy(data):
    sizes = data.draw(shapes(min_rank=2, max_rank=2), label="shape")  # [rows, classes], rows may be 0
    if sizes[1] == 0:
        sizes[1] = 1  # classes >= 1: an empty class dim has no loss
    # float16 'sum' of 1e4-scale losses overflows (in torch too): large logits for the other dtypes
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    kinds = ["randn", "constant"] + (["large"] if dtype != torch.float16 else [])
    x, what = data.draw(tensors(dtypes=[dtype], sizes=sizes, kinds=kinds, specials=False), label="logits")
    gen = torch.Generator(device=DEV).manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    t = torch.randint(0, sizes[1], (sizes[0],), generator=gen, device=DEV)
    t[torch.rand(sizes[0], generator=gen, device=DEV) < 0.2] = -100
    w = torch.rand(sizes[1], generator=gen, device=DEV) + 0.5 if data.draw(st.booleans(), label="weighted") else None
    reduction = data.draw(st.sampled_from(["none", "sum", "mean"]), label="reduction")
    smoothing = data.draw(st.sampled_from([0.0, 0.1]), label="label_smoothing")
    xa, xb = x.detach().clone().requires_grad_(), x.detach().double().requires_grad_()
    got = reducekit.cross_entropy(xa, t, w, reduction=reduction, label_smoothing=smoothing)
    want = torch.nn.functional.cross_entropy(xb, t, None if w is None else w.double(), reduction=reduction,
                                             label_smoothing=smoothing)
    assert got.dtype == x.dtype and got.shape == want.shape, \
        f"loss {got.dtype} {tuple(got.shape)}, torch's {x.dtype} {tuple(want.shape)} ({what})"
    rtol, atol = ce_tests.TOL[x.dtype]
    # 'mean' over rows that are all ignored is NaN in both (test_all_ignored_mean_is_nan); the
    # message keeps torch's account of the mismatch (where, how far, what was allowed)
    torch.testing.assert_close(got.double(), want.detach(), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda detail: f"loss ({what}, {reduction}, smoothing {smoothing}): {detail}")
    if got.numel() and got.requires_grad:
        g = torch.randn(got.shape, device=DEV, dtype=torch.float64)
        got.backward(g.to(got.dtype))
        want.backward(g)
        ce_tests.assert_grad_close(xa.grad, xb.grad, x, t, w, g, reduction, smoothing,
                                   f"dlogits ({what}, {reduction}, smoothing {smoothing})")
