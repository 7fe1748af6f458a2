# SPDX-License-Identifier: Apache-2.0
"""reducekit softmax / log_softmax against torch in float64 on the same data.

The oracle is torch's softmax of x.double(). Tolerances (DESIGN.md, Tests):
  float32  |y - ref| <= 2e-5 |ref| + 2e-6 * (largest |ref| of the row)
  float64  the same with 1e-12 and 1e-13
  fp16/bf16  within 2 units in the last place of the float64 result rounded to the dtype
and NaN / inf exactly where the oracle has them. conftest.py skips this module, with the
reason, where torch, a GPU or a built reducekit is missing.
"""
import math
import re

import pytest
import torch

import reducekit

DEV = "cuda"
OPS = ["softmax", "log_softmax"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HALF = (torch.float16, torch.bfloat16)
RK = {"softmax": reducekit.softmax, "log_softmax": reducekit.log_softmax}
TORCH = {"softmax": torch.softmax, "log_softmax": torch.log_softmax}
RAW = {"softmax": "softmax", "log_softmax": "log_softmax"}

# Row lengths: tiny, around a warp, odd, around vector widths (2045 vs 2048), primes
# (no vector width divides them), and powers of two up to 2^20 (long rows, chunked path).
LENGTHS = sorted({1, 2, 3, 31, 32, 33, 127, 781, 1000, 2045, 2048, 4099, 40009} | {2**k for k in range(21)})


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def rows_for(n, small=67, budget=2**21):
    """Many rows for short rows (67: not a multiple of any rows-per-block), few for long ones."""
    return small if n <= 4096 else max(2, budget // n)


def reference(op, x, dim):
    return TORCH[op](x.double(), dim)


def _ordered_bits(t):
    """16-bit floats as integers whose differences count units in the last place (sign-magnitude to two's complement)."""
    bits = t.contiguous().view(torch.int16).to(torch.int32)
    magnitude = bits & 0x7FFF
    return torch.where(bits < 0, -magnitude, magnitude)


def _describe(out, ref, bad, extra=""):
    idx = tuple(int(i) for i in bad.nonzero()[0])
    return (f"{int(bad.sum())} of {bad.numel()} elements off; first at {idx}: got {out[idx].item()!r}, "
            f"float64 reference {ref[idx].item()!r}{extra}")


def assert_matches_reference(out, ref, dtype, dim):
    """out (any float dtype) against the float64 oracle ref, with the dtype's tolerance."""
    assert out.dtype == dtype, f"output dtype {out.dtype}, expected {dtype}"
    assert out.shape == ref.shape, f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    assert out.device == ref.device
    if ref.numel() == 0:
        return
    o = out.double()
    nan_o, nan_r = o.isnan(), ref.isnan()
    assert torch.equal(nan_o, nan_r), "NaN pattern differs: " + _describe(o, ref, nan_o != nan_r)
    inf_r = ref.isinf()
    bad = inf_r & (o != ref)
    assert not bool(bad.any()), "infinities differ: " + _describe(o, ref, bad)
    finite = ref.isfinite()
    if dtype in HALF:
        # compare with the correctly rounded result (float64 -> dtype; torch may round twice via
        # float32, which can move a halfway case by one unit: the 2-unit allowance covers it)
        rounded = ref.to(dtype)
        ulps = (_ordered_bits(out) - _ordered_bits(rounded)).abs()
        # bfloat16 shares float32's exponent range: a kernel that flushes float32 subnormals to zero
        # may miss bfloat16 subnormals by many units, but by less than float32's smallest normal
        flushed = (o - rounded.double()).abs() <= torch.finfo(torch.float32).tiny
        # float32 accumulation: an output far below its row's largest term (log_softmax's -1e-14
        # beside terms of 1e4) is off by float32 rounding of those terms, not by its own ulps
        magnitude = torch.where(finite, ref.abs(), torch.zeros_like(ref))
        row_scale = magnitude if ref.dim() == 0 else magnitude.amax(dim=dim, keepdim=True)
        absorbed = (o - ref).abs() <= 4 * torch.finfo(torch.float32).eps * row_scale
        bad = finite & (ulps > 2) & ~flushed & ~absorbed
        assert not bool(bad.any()), f"more than 2 ulp from the rounded reference ({dtype}): " + _describe(
            o, ref, bad, f", rounded {rounded[tuple(int(i) for i in bad.nonzero()[0])].item()!r}")
        return
    # 2e-5: exp's error grows with |x - max| and a long row's sum adds a few 1e-6; torch's own
    # column softmax over 131072 elements is off by 1.5e-5, a careless summation order more
    rtol = 2e-5 if dtype == torch.float32 else 1e-12
    magnitude = torch.where(finite, ref.abs(), torch.zeros_like(ref))
    row_scale = magnitude if ref.dim() == 0 else magnitude.amax(dim=dim, keepdim=True)
    tol = rtol * ref.abs() + (rtol / 10) * row_scale
    bad = finite & ((o - ref).abs() > tol)
    assert not bool(bad.any()), f"error above {rtol:g} relative ({dtype}): " + _describe(o, ref, bad)


def check(op, x, dim):
    """Runs reducekit's op on x and compares with the float64 oracle; returns the output."""
    out = RK[op](x, dim=dim)
    assert_matches_reference(out, reference(op, x, dim), x.dtype, dim)
    return out


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, device=DEV, dtype=dtype)


# ----------------------------------------------------------------------------- row lengths and dtypes

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_row_lengths(op, dtype, n):
    x = randn(rows_for(n), n, dtype=dtype)
    before = x.clone()
    out = check(op, x, -1)
    assert torch.equal(x, before), "the input was modified"
    assert out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_ten_million_long_row(op, dtype):
    # DESIGN.md promises any length up to 10^7; an odd length leaves a ragged last chunk
    check(op, randn(2, 10**7 - 1, dtype=dtype), -1)


# ----------------------------------------------------------------------------- special values

VALUE_KINDS = ["randn", "large", "neg_inf", "pos_inf", "nan", "all_neg_inf", "constant", "mixed"]


def make_values(kind, m, n, dtype):
    """An (m, n) tensor of `kind`; special values land in chosen rows, including a row's first
    and last element (vectorized bodies and scalar tails both see them)."""
    g = torch.randn(m, n, device=DEV, dtype=torch.float64)
    if kind == "large":
        # exp(x - max) underflows for most elements; clamp so float16 inputs stay finite
        g = (1e4 * g).clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max)
    elif kind == "constant":
        g = (100 * torch.randn(m, 1, device=DEV, dtype=torch.float64)).expand(m, n)
    x = g.to(dtype).contiguous()
    inf, nan = float("inf"), float("nan")
    last = n - 1
    if kind == "neg_inf":
        # -inf padding: every other row loses ~1/4 of its entries, its first and last among them
        mask = torch.rand(m, n, device=DEV) < 0.25
        mask[1::2] = False
        mask[0::2, 0] = True
        mask[0::2, last] = True
        if n > 1:
            mask[0::2, 1] = False  # keep one finite entry so the row stays defined
        x[mask] = -inf
    elif kind == "pos_inf":
        x[0, last] = inf
        x[1 % m, 0] = inf
        x[2 % m, n // 2] = inf
    elif kind == "nan":
        x[0, last] = nan
        x[1 % m, 0] = nan
        x[2 % m, n // 3] = nan
    elif kind == "all_neg_inf":
        x[0] = -inf
        x[m - 1] = -inf
    elif kind == "mixed":
        x[0, 0] = -inf
        x[0, last] = -inf
        x[1 % m] = -inf
        x[2 % m, n // 2] = inf
        x[2 % m, last] = -inf
        x[3 % m, last] = nan
    return x


@pytest.mark.parametrize("n", [1, 7, 1000, 4099, 40009, 2**18])
@pytest.mark.parametrize("kind", VALUE_KINDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_special_values(op, dtype, kind, n):
    m = max(5, min(33, 2**20 // n))
    x = make_values(kind, m, n, dtype)
    out = check(op, x, -1)
    if kind == "all_neg_inf":
        assert bool(out[0].isnan().all()), "an all -inf row gives NaN, like torch"
    if kind == "constant":
        # a constant row is exactly uniform up to rounding of 1/n
        expect = torch.full((m, n), -math.log(n) if op == "log_softmax" else 1.0 / n, dtype=torch.float64, device=DEV)
        assert_matches_reference(out, expect, dtype, -1)


# ----------------------------------------------------------------------------- layouts, dims, ranks

def _layout(case, n):
    """(x, dim) for one layout case with reduced extent n."""
    if case == "sliced_rows":  # row stride n + 5: not a multiple of any vector width
        return randn(9, n + 5)[:, :n], -1
    if case == "sliced_rows_offset":  # starts 3 elements into each row of a wider tensor
        return randn(9, n + 64)[:, 3:3 + n], -1
    if case == "offset_base":  # contiguous rows from an odd element offset: misaligned base pointer
        return randn(9 * n + 1)[1:].view(9, n), -1
    if case == "transposed":  # reduced dim has stride 9
        return randn(n, 9).t(), -1
    if case == "middle_dim":
        return randn(5, n, 7), 1
    if case == "dim0":
        return randn(n, 6), 0
    if case == "dim0_wide":  # column softmax with a long inner extent
        return randn(n, 300), 0
    if case == "neg_dim":
        return randn(4, n, 3), -2
    if case == "neg_dim_first":
        return randn(n, 2, 3), -3
    if case == "rank3_last":
        return randn(3, 5, n), -1
    if case == "rank4_last":
        return randn(2, 3, 4, n), -1
    if case == "rank4_dim1":
        return randn(2, n, 3, 5), 1
    if case == "permuted":  # channels-last-like: reduced dim has stride 1 but others are permuted
        return randn(2, 4, 3, n).permute(0, 3, 1, 2), 1
    if case == "expanded":  # stride-0 rows
        return randn(1, n).expand(6, n), -1
    if case == "expanded_reduced":  # stride-0 along the reduced dim
        return randn(5, 1).expand(5, n), -1
    if case == "rank1":
        return randn(n), 0
    raise ValueError(case)


LAYOUTS = ["sliced_rows", "sliced_rows_offset", "offset_base", "transposed", "middle_dim", "dim0", "dim0_wide",
           "neg_dim", "neg_dim_first", "rank3_last", "rank4_last", "rank4_dim1", "permuted", "expanded",
           "expanded_reduced", "rank1"]


@pytest.mark.parametrize("n", [33, 1000, 4099, 2**17])
@pytest.mark.parametrize("case", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_layouts(op, dtype, case, n):
    x, dim = _layout(case, n)
    check(op, x.to(dtype), dim)


@pytest.mark.parametrize("shape,dim", [((0, 7), -1), ((5, 0), -1), ((0, 7), 0), ((5, 0), 0), ((3, 0, 4), 1),
                                       ((3, 0, 4), -1), ((0,), 0), ((2, 3, 0), 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_zero_size(op, dtype, shape, dim):
    x = randn(*shape, dtype=dtype)
    out = RK[op](x, dim=dim)
    assert out.shape == x.shape and out.dtype == dtype and out.device == x.device


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("op", OPS)
def test_zero_dim_tensor(op, dim):
    x = torch.tensor(3.5, device=DEV)
    check(op, x, dim)


# ----------------------------------------------------------------------------- properties

@pytest.mark.parametrize("n", [1, 33, 1000, 4099, 40009, 2**20])
@pytest.mark.parametrize("kind", ["randn", "large"])
def test_rows_sum_to_one(kind, n):
    x = make_values(kind, max(2, min(64, 2**21 // n)), n, torch.float32)
    sums = reducekit.softmax(x, dim=-1).double().sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), rtol=0, atol=1e-5), f"row sums off by {(sums - 1).abs().max()}"


@pytest.mark.parametrize("n", [33, 1000, 4099, 2**18])
@pytest.mark.parametrize("op", OPS)
def test_shift_invariance(op, n):
    # x on a 2^-10 grid in (-8, 8): x + 64 is exact in float32, so both calls see the same differences
    x = (torch.rand(9, n, device=DEV) * 16 - 8).mul(1024).round().div(1024)
    a, b = RK[op](x, dim=-1), RK[op](x + 64, dim=-1)
    assert_matches_reference(b, a.double(), torch.float32, -1)


@pytest.mark.parametrize("n", [7, 1000, 4099, 40009, 2**20])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_deterministic(op, dtype, n):
    x = randn(max(2, min(512, 2**22 // n)), n, dtype=dtype)
    first = RK[op](x, dim=-1)
    RK[op](randn(3, 2 * n + 1, dtype=dtype), dim=-1)  # other work in between must not matter
    second = RK[op](x, dim=-1)
    assert torch.equal(first, second), "two runs on the same input differ"


@pytest.mark.parametrize("m,n", [(4096, 33), (4096, 1000), (4096, 4096), (64, 40009), (8, 262144), (20, 2**20)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_batch_invariance(op, dtype, m, n):
    # the strategy depends on (N, dtype) only, so a row's result cannot depend on its neighbours
    x = randn(m, n, dtype=dtype)
    batch = RK[op](x, dim=-1)
    for i in sorted({0, 1, m // 2, m - 1}):
        alone = RK[op](x[i:i + 1].clone(), dim=-1)
        assert torch.equal(alone, batch[i:i + 1]), f"row {i} alone differs from row {i} in a batch of {m}"
        assert torch.equal(RK[op](x[i].clone(), dim=-1), batch[i]), f"row {i} as a 1-d tensor differs"
    pair = RK[op](x[m - 2:].clone(), dim=-1)
    assert torch.equal(pair, batch[m - 2:]), "the last two rows as a batch of 2 differ"


# ----------------------------------------------------------------------------- gradients

def grad_formula(op, y, g, dim):
    """dL/dx in float64 from the forward output y (probabilities or log-probabilities) and dL/dy."""
    y, g = y.double(), g.double()
    if op == "softmax":
        return y * (g - (g * y).sum(dim, keepdim=True))
    return g - y.exp() * g.sum(dim, keepdim=True)


# Below these, results are subnormal: half types have a few bits left there, and a kernel that
# flushes float32 subnormals to zero loses everything under 2^-126.
GRAD_FLOOR = {torch.float16: 2.0**-23, torch.bfloat16: 2.0**-126, torch.float32: 2.0**-126, torch.float64: 0.0}
# The kernels' exp (fast_exp, src/kernels/numeric.cuh) flushes results below 2^-126 to zero by
# design, in float32 arithmetic (also for 16-bit data); float64's exp does not flush.
EXP_FLUSH = {torch.float16: 2.0**-126, torch.bfloat16: 2.0**-126, torch.float32: 2.0**-126, torch.float64: 0.0}


def flush_allowance(op, y64, g, dim, dtype, rtol):
    """What the documented exp flush can take from dx, and nothing more. A probability p (softmax's
    y, exp of log_softmax's y) can only have been flushed where it lies below EXP_FLUSH (within the
    forward's rtol of it); there the kernel holds 0 for p. softmax: dx = y (dy - sum(dy y)) loses
    p |dy - sum(dy y)| at the flushed element, and every element of the row y |dy_j| p_j through the
    sum; log_softmax: dx = dy - exp(y) sum(dy) loses p |sum(dy)|."""
    p = y64 if op == "softmax" else y64.exp()
    dropped = torch.where(p < EXP_FLUSH[dtype] * (1 + rtol), p, torch.zeros_like(p))
    if op == "softmax":
        return dropped * (g - (g * y64).sum(dim, keepdim=True)).abs() + \
            y64 * (g.abs() * dropped).sum(dim, keepdim=True)
    return dropped * g.sum(dim, keepdim=True).abs()


def assert_grad_close(op, dx, ref, y64, g, dim, rtol):
    """Relative to each element's condition: the formulas subtract row sums, so errors scale with
    them; plus the subnormal floor and the exp flush (flush_allowance)."""
    floor = GRAD_FLOOR[dx.dtype]
    g = g.double()
    if op == "softmax":
        scale = ref.abs() + y64 * (g.abs() + (g * y64).abs().sum(dim, keepdim=True))
    else:
        scale = ref.abs() + g.abs() + y64.exp() * g.abs().sum(dim, keepdim=True)
    err = (dx.double() - ref).abs()
    allowed = rtol * scale + floor + flush_allowance(op, y64, g, dim, dx.dtype, rtol)
    bad = err > allowed
    if bool(bad.any()):
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError("gradient off: " + _describe(dx.double(), ref, bad, f", allowed {allowed[i].item()!r} "
                                                          f"(y {y64[i].item()!r}, dy {g[i].item()!r})"))


GRAD_CASES = [((67, 33), -1), ((9, 4099), -1), ((3, 2**17), -1), ((5, 1000, 3), 1), ((1000, 6), 0), ((4, 1), -1)]


@pytest.mark.parametrize("shape,dim", GRAD_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_backward(op, dtype, shape, dim):
    x = randn(*shape, dtype=dtype).requires_grad_()
    g = randn(*shape, dtype=dtype)
    y = RK[op](x, dim=dim)
    y.backward(g)
    assert x.grad is not None and x.grad.dtype == dtype and x.grad.shape == x.shape
    if dtype in HALF:
        # the backward starts from the saved 16-bit y (as torch's does); exp of a rounded log-probability
        # is off by |y| units, so the oracle starts from that same y
        y64, rtol = y.detach().double(), 2.0**-7
    else:
        y64, rtol = reference(op, x.detach(), dim), (2e-5 if dtype == torch.float32 else 1e-12)
    assert_grad_close(op, x.grad, grad_formula(op, y64, g, dim), y64, g, dim, rtol)


def _pair_input(low, dim):
    """Rows of two, 0 and `low`, along dim: [3, 2, 5] over dim -2 (the column path) or [7, 2]
    over dim -1 (the row path); and the mask of the `low` elements."""
    pair = torch.tensor([0.0, low], device=DEV)
    x = pair.view(1, 2, 1).expand(3, 2, 5).contiguous() if dim == -2 else pair.view(1, 2).expand(7, 2).contiguous()
    low_mask = torch.zeros_like(x, dtype=torch.bool)
    low_mask.select(dim, 1).fill_(True)
    return x, low_mask


@pytest.mark.parametrize("dim", [-2, -1], ids=["columns", "rows"])
@pytest.mark.parametrize("op", OPS)
def test_backward_where_exp_flushes(op, dim):
    """test_properties.py's shrunk case: float32 softmax over dim -2 (rows of 2 read as columns),
    dx 0 where the float64 gradient is 1.85e-38: the probability behind it lay below 2^-126 and the
    kernel's exp flushed it, as documented. Here exp(-87.5) = 1.0e-38 is flushed; the gradient at it
    (2.0e-38 for softmax, -3.0e-38 for log_softmax) is over the subnormal floor, so only
    flush_allowance lets it pass. One step up, exp(-87) = 1.6e-38 is not flushed, and the same
    loss of the gradient there is refused."""
    dy_pair = [-1.0, 1.0] if op == "softmax" else [3.0, 0.0]
    for low, flushed in ((-87.5, True), (-87.0, False)):
        x, low_mask = _pair_input(low, dim)
        dy = torch.where(low_mask, dy_pair[1], dy_pair[0]).float()
        y64 = reference(op, x, dim)
        ref = grad_formula(op, y64, dy, dim)
        assert bool((ref[low_mask].abs() > GRAD_FLOOR[torch.float32]).all()), f"{ref[low_mask].tolist()}"
        if flushed:
            xa = x.clone().requires_grad_()
            RK[op](xa, dim=dim).backward(dy)
            assert_grad_close(op, xa.grad, ref, y64, dy, dim, 2e-5)
        dropped = torch.where(low_mask, 0.0, ref).float()  # dx with the low element's gradient lost
        if flushed:
            assert_grad_close(op, dropped, ref, y64, dy, dim, 2e-5)
        else:
            with pytest.raises(AssertionError, match="gradient off"):
                assert_grad_close(op, dropped, ref, y64, dy, dim, 2e-5)


@pytest.mark.parametrize("shape,dim", GRAD_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_backward_op_direct(op, dtype, shape, dim):
    check_backward_op_direct(op, dtype, shape, dim)


def check_backward_op_direct(op, dtype, shape, dim):
    """The raw backward op from a given y (reducekit's forward output): no forward error involved."""
    x = randn(*shape, dtype=dtype)
    y = RK[op](x, dim=dim)
    dy = randn(*shape, dtype=dtype)
    dx = getattr(torch.ops.reducekit, RAW[op] + "_backward")(y, dy, dim)
    assert dx.dtype == dtype and dx.shape == y.shape
    y64 = y.double()
    rtol = {torch.float32: 2e-5, torch.float64: 1e-12}.get(dtype, 2.0**-7)
    assert_grad_close(op, dx, grad_formula(op, y64, dy, dim), y64, dy, dim, rtol)


@pytest.mark.parametrize("shape,dim", [((3, 7), -1), ((4, 5, 3), 1), ((6,), 0), ((2, 1), -1), ((5, 3), 0)])
@pytest.mark.parametrize("op", OPS)
def test_gradcheck(op, shape, dim):
    x = randn(*shape, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: RK[op](t, dim=dim), (x,), eps=1e-6, atol=1e-7, rtol=1e-5)


# ----------------------------------------------------------------------------- PyTorch integration

@pytest.mark.parametrize("shape,dim", [((8, 33), -1), ((4, 5, 6), 1), ((3, 4099), -1)])
@pytest.mark.parametrize("op", OPS)
def test_opcheck_forward(op, shape, dim):
    x = randn(*shape).requires_grad_()
    torch.library.opcheck(getattr(torch.ops.reducekit, RAW[op]).default, (x, dim))


@pytest.mark.parametrize("shape,dim", [((8, 33), -1), ((4, 5, 6), 1)])
@pytest.mark.parametrize("op", OPS)
def test_opcheck_backward(op, shape, dim):
    y = RK[op](randn(*shape), dim=dim)
    dy = randn(*shape)
    torch.library.opcheck(getattr(torch.ops.reducekit, RAW[op] + "_backward").default, (y, dy, dim))


@pytest.mark.parametrize("op", OPS)
def test_compile_fullgraph(op):
    def f(x):
        return RK[op](x * 2, dim=1) + 1

    compiled = torch.compile(f, fullgraph=True)
    x = randn(6, 1000, 3)
    assert torch.equal(compiled(x), f(x))


def test_compile_dynamic_shapes():
    # the fake kernels must produce the right sizes for symbolic shapes too
    def f(x):
        return reducekit.softmax(x, dim=-1) * reducekit.log_softmax(x, dim=0)

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for shape in [(8, 100), (16, 333), (5, 4099)]:
        x = randn(*shape)
        assert torch.equal(compiled(x), f(x)), f"compiled result differs at {shape}"


def test_compile_backward():
    def loss(x, w):
        return (reducekit.softmax(x, dim=-1) * w).sum() + reducekit.log_softmax(x, dim=0).mean()

    compiled = torch.compile(loss, fullgraph=True)
    x0, w = randn(32, 513), randn(32, 513)
    xa, xb = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    loss(xa, w).backward()
    compiled(xb, w).backward()
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("m,n", [(4096, 1000), (64, 40009), (4, 2**20)])
@pytest.mark.parametrize("op", OPS)
def test_cuda_graph(op, m, n):
    # no host sync or allocation outside torch's allocator in the hot path: capture and replay must work
    x, dy = randn(m, n), randn(m, n)
    backward = getattr(torch.ops.reducekit, RAW[op] + "_backward")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch.cuda.graph's docs ask
        backward(RK[op](x, dim=-1), dy, -1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = RK[op](x, dim=-1)
        dx = backward(y, dy, -1)
    x.copy_(randn(m, n))  # new data in the captured input
    graph.replay()
    torch.cuda.synchronize()
    y_eager = RK[op](x, dim=-1)
    assert torch.equal(y, y_eager), "graph replay differs from an eager call"
    assert torch.equal(dx, backward(y_eager, dy, -1))


# ----------------------------------------------------------------------------- split rows (workspace)
# Rows longer than a cluster's registers (2**20 and up) split into chunks over a cooperative grid,
# with arrival counters from a zeroed per-stream buffer that every call leaves zero again. By
# default only 16-bit rows split (float32 and float64 rows stream), so the tests below that target
# the split path use bfloat16.

@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_split_rows_many_calls(op, dtype):
    # the same counters serve call after call: a counter left nonzero would corrupt the next one
    x = randn(5, 2**20 + 5, dtype=dtype)
    first = check(op, x, -1)
    for m, n in [(1, 2**20 + 5), (7, 3 * 2**19 + 1), (5, 2**20 + 5)]:
        check(op, randn(m, n, dtype=dtype), -1)
    assert torch.equal(RK[op](x, dim=-1), first), "a later call on the same input differs"


@pytest.mark.parametrize("op", OPS)
def test_split_rows_sliced_and_offset(op):
    base = randn(4, 2**20 + 64, dtype=torch.bfloat16)
    check(op, base[:, 1:2**20 + 1], -1)   # rows one element off 16-byte alignment
    check(op, base[:, :1000003], -1)      # sliced rows, a prime length


@pytest.mark.parametrize("op", OPS)
def test_split_rows_on_two_streams(op):
    # each stream has a counter buffer of its own, so concurrent calls do not share counters
    xs = [randn(6, 2**20, dtype=torch.bfloat16) for _ in range(2)]
    want = [RK[op](x, dim=-1) for x in xs]
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for x, stream in zip(xs, streams):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            outs.append([RK[op](x, dim=-1) for _ in range(3)])
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    for got, w in zip(outs, want):
        for y in got:
            assert torch.equal(y, w), "a call on a side stream differs"


@pytest.mark.parametrize("op", OPS)
def test_split_rows_cuda_graph_replays(op):
    # under capture the workspace comes from the graph's pool with a memset node; replays repeat
    x = randn(10, 2**20, dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        RK[op](x, dim=-1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = RK[op](x, dim=-1)
    for _ in range(3):
        x.copy_(randn(10, 2**20, dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, RK[op](x, dim=-1)), "graph replay differs from an eager call"


@pytest.mark.parametrize("op,module,torch_module", [("softmax", "Softmax", torch.nn.Softmax),
                                                    ("log_softmax", "LogSoftmax", torch.nn.LogSoftmax)])
def test_nn_modules(op, module, torch_module):
    cls = getattr(reducekit.nn, module)
    x = randn(4, 7, 5)
    m = cls(dim=1)
    assert isinstance(m, torch.nn.Module)
    assert torch.equal(m(x), RK[op](x, dim=1))
    torch.testing.assert_close(m(x), torch_module(dim=1)(x), rtol=1e-5, atol=1e-6)
    assert torch.equal(cls()(x), RK[op](x, dim=-1)), "the default dim is -1"
    m.load_state_dict(torch_module(dim=1).state_dict())  # drop-in: torch's (empty) state dict loads
    xg = x.clone().requires_grad_()
    m(xg).sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape


# ----------------------------------------------------------------------------- bad input

ERRORS = (RuntimeError, ValueError, TypeError, IndexError)


CALLERS = ["wrapper", "raw_op", "module"]


def _call(op, caller, x, dim):
    """The Python wrapper, the registered op and the nn module must all reject bad input."""
    if caller == "wrapper":
        return RK[op](x, dim=dim)
    if caller == "raw_op":
        return getattr(torch.ops.reducekit, RAW[op])(x, dim)
    return {"softmax": reducekit.nn.Softmax, "log_softmax": reducekit.nn.LogSoftmax}[op](dim=dim)(x)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("op", OPS)
def test_rejects_integer_tensor(op, caller):
    x = torch.arange(12, device=DEV).view(3, 4)
    # the core's dtype check answers here, and the C++ API names its argument x (src/ops/softmax.cu)
    with pytest.raises(ERRORS, match=r"\bx\b"):
        _call(op, caller, x, -1)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("op", OPS)
def test_rejects_cpu_tensor(op, caller):
    with pytest.raises(ERRORS, match=r"(?i)\binput\b|cuda|\bcpu\b|device"):
        _call(op, caller, torch.randn(3, 4), -1)


@pytest.mark.parametrize("shape,dim", [((3, 4), 2), ((3, 4), -3), ((5,), 1), ((), 1), ((2, 3, 4), 3)])
@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("op", OPS)
def test_rejects_dim_out_of_range(op, caller, shape, dim):
    # torch's IndexError and words, as torch.softmax gives
    bound = max(len(shape), 1)
    with pytest.raises(IndexError, match=re.escape(f"Dimension out of range (expected to be in range of "
                                                   f"[{-bound}, {bound - 1}], but got {dim})")):
        _call(op, caller, randn(*shape), dim)
    if caller == "raw_op":  # the fake kernel, as torch.compile traces with
        with pytest.raises(IndexError, match=r"^Dimension out of range"):
            _call(op, caller, torch.empty(shape, device="meta"), dim)


@pytest.mark.parametrize("op", OPS)
def test_rejects_integer_dtype_argument(op):
    # named as dtype= (the cast input used to take the blame), a RuntimeError as torch's
    with pytest.raises(RuntimeError, match=rf"^dtype: int64 is not supported; {op} computes in"):
        RK[op](randn(3, 4), dim=-1, dtype=torch.int64)


@pytest.mark.parametrize("op", OPS)
def test_backward_rejects_mismatch(op):
    backward = getattr(torch.ops.reducekit, RAW[op] + "_backward")
    y = RK[op](randn(3, 4), dim=-1)
    with pytest.raises(ERRORS, match=r"(?i)\bdy\b|\by\b|shape|size"):
        backward(y, randn(3, 5), -1)
    with pytest.raises(ERRORS, match=r"(?i)\bdy\b|\by\b|dtype|type"):
        backward(y, randn(3, 4, dtype=torch.float64), -1)
    with pytest.raises(ERRORS, match=r"(?i)\bdy\b|\by\b|cuda|\bcpu\b|device"):
        backward(y, torch.randn(3, 4), -1)
    with pytest.raises(IndexError, match=r"^Dimension out of range"):
        backward(y, randn(3, 4), 2)


# ----------------------------------------------------------------------------- over 2^31 elements

@pytest.mark.large
def test_more_than_2_31_elements():
    rows, n = 2**31 // 1024 + 1, 1024  # the last row starts at element 2^31
    need = 3 * rows * n * 2  # x, y and headroom, in bfloat16
    if torch.cuda.mem_get_info()[0] < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory")
    x = torch.randn(rows, n, device=DEV, dtype=torch.bfloat16)
    for op in OPS:
        y = RK[op](x, dim=-1)
        picked = torch.tensor([0, 1, rows // 2, rows - 2, rows - 1], device=DEV)
        assert_matches_reference(y[picked], reference(op, x[picked], -1), torch.bfloat16, -1)
        del y
    # the same tensor reduced over its 2M-long leading dim: 64-bit offsets in the column path
    y = reducekit.softmax(x, dim=0)
    cols = torch.tensor([0, 511, 1023], device=DEV)
    assert_matches_reference(y[:, cols], reference("softmax", x[:, cols], 0), torch.bfloat16, 0)


# ----------------------------------------------------------------------------- random shapes (optional)

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # hypothesis is optional: the cases above cover the plan
    st = None

if st is not None:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_random_shapes(data):
        rank = data.draw(st.integers(1, 4), label="rank")
        sizes = [data.draw(st.sampled_from([0, 1, 2, 3, 5, 8, 17, 33, 130]), label="size") for _ in range(rank)]
        dim = data.draw(st.integers(-rank, rank - 1), label="dim")
        sizes[dim] = data.draw(st.sampled_from([1, 2, 31, 32, 33, 127, 1000, 2045, 4099]), label="n")
        while math.prod(sizes) > 2**20:  # keep every example small: halve the largest other extent
            k = max((i for i in range(rank) if i != dim % rank), key=lambda i: sizes[i])
            sizes[k] //= 2
        perm = data.draw(st.permutations(range(rank)), label="perm")
        dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        op = data.draw(st.sampled_from(OPS), label="op")
        seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
        gen = torch.Generator(device=DEV).manual_seed(seed)
        base = torch.randn(*[sizes[p] for p in perm], device=DEV, generator=gen).to(dtype)
        x = base.permute(*[list(perm).index(i) for i in range(rank)])  # a non-contiguous view of shape `sizes`
        assert list(x.shape) == sizes
        check(op, x, dim)


# ----------------------------------------------------------------------------- dims other than -1 (columns)
# A non-innermost dim of a contiguous tensor runs on the column kernel, read in place (no copy);
# other layouts (transposed, sliced, permuted) go through the binding's contiguous copy.

COLUMN_CASES = [((2, 19, 8, 8), 1), ((3, 150, 33), 1), ((2, 1000, 64), 1), ((5000, 3), 0), ((4, 7, 1001), -2),
                ((2, 2, 16384), 1), ((3, 3200, 8), 1), ((2, 3201, 8), 1)]


def column_values(kind, shape, dim, dtype):
    """make_values' special rows laid out as columns of a contiguous tensor over dim."""
    dim = dim % len(shape)
    moved = list(shape[:dim]) + list(shape[dim + 1:]) + [shape[dim]]
    m = math.prod(moved[:-1])
    x = make_values(kind, m, shape[dim], dtype).reshape(moved)
    return x.movedim(-1, dim).contiguous()


@pytest.mark.parametrize("kind", ["randn", "large", "mixed", "nan", "pos_inf", "all_neg_inf"])
@pytest.mark.parametrize("shape,dim", COLUMN_CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_columns_forward(op, dtype, shape, dim, kind):
    x = column_values(kind, shape, dim, dtype)
    assert x.is_contiguous()
    before = x.clone()
    check(op, x, dim)
    assert torch.equal(x.isnan(), before.isnan()) and torch.equal(x.nan_to_num(), before.nan_to_num())


@pytest.mark.parametrize("shape,dim", COLUMN_CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_columns_backward_op_direct(op, dtype, shape, dim):
    check_backward_op_direct(op, dtype, shape, dim)


@pytest.mark.parametrize("shape,dim", [((2, 19, 8, 8), 1), ((3, 150, 33), 1), ((4, 5000, 3), 1)])
@pytest.mark.parametrize("op", OPS)
def test_columns_autograd_float64(op, shape, dim):
    x = randn(*shape, dtype=torch.float64).requires_grad_()
    g = randn(*shape, dtype=torch.float64)
    RK[op](x, dim=dim).backward(g)
    xt = x.detach().clone().requires_grad_()
    TORCH[op](xt, dim).backward(g)
    torch.testing.assert_close(x.grad, xt.grad, rtol=1e-12, atol=1e-13)


# Non-contiguous inputs with a non-innermost dim take the binding's copy: still correct.
def _non_contiguous(case, dtype):
    if case == "sliced":  # inner extent sliced from a wider tensor
        return randn(3, 150, 40, dtype=dtype)[:, :, 3:36], 1
    if case == "transposed":  # the last two dims swapped: dim 1 has stride 1, rows in place
        return randn(3, 33, 150, dtype=dtype).transpose(1, 2), 1
    if case == "channels_last":
        return randn(2, 19, 8, 8, dtype=dtype).to(memory_format=torch.channels_last), 1
    if case == "step":  # every other slab
        return randn(6, 150, 33, dtype=dtype)[::2], 1
    raise ValueError(case)


@pytest.mark.parametrize("case", ["sliced", "transposed", "channels_last", "step"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_columns_non_contiguous(op, dtype, case):
    x, dim = _non_contiguous(case, dtype)
    check(op, x, dim)
    dy = torch.randn_like(x)
    y = RK[op](x, dim=dim)
    dx = getattr(torch.ops.reducekit, RAW[op] + "_backward")(y, dy, dim)
    y64 = y.double()
    rtol = {torch.float32: 2e-5, torch.float64: 1e-12}.get(dtype, 2.0**-7)
    assert_grad_close(op, dx, grad_formula(op, y64, dy, dim), y64, dy, dim, rtol)


@pytest.mark.parametrize("shape", [(8, 150, 1001), (4, 1000, 256), (3, 5000, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_columns_deterministic_and_batch_invariant(op, dtype, shape):
    x = randn(*shape, dtype=dtype)
    batch = RK[op](x, dim=1)
    assert torch.equal(RK[op](x, dim=1), batch), "two runs differ"
    for i in (0, shape[0] // 2 + 1, shape[0] - 1):
        assert torch.equal(RK[op](x[i:i + 1].clone(), dim=1), batch[i:i + 1]), f"slab {i} alone differs"
        # as a 2-d tensor the same columns are [K, inner] over dim 0, from an offset pointer
        assert torch.equal(RK[op](x[i], dim=0), batch[i]), f"slab {i} as a view differs"


def test_planner_overrides_are_explicit_and_named():
    """torch.ops.reducekit._set_tuning: an unknown name is refused by name; under an override
    (clusters off: 128256-column rows re-read instead of staged) the answer stays right, and
    clearing it gives the shipped plan's bits back. That overrides reach the plan is checked by
    the C++ tests whose paths need one (RereadRows, the split tests: "the split kernel did not
    run")."""
    with pytest.raises(RuntimeError, match="'max_clusters'"):
        torch.ops.reducekit._set_tuning("max_clusters", 1)
    x = randn(3, 128256, dtype=torch.bfloat16)
    shipped = reducekit.softmax(x, -1)
    try:
        torch.ops.reducekit._set_tuning("max_cluster", 1)
        overridden = reducekit.softmax(x, -1)
    finally:
        torch.ops.reducekit._clear_tuning()
    torch.testing.assert_close(overridden.float(), shipped.float(), rtol=2.0**-7, atol=1e-6)
    assert torch.equal(reducekit.softmax(x, -1), shipped)
