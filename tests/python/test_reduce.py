# SPDX-License-Identifier: Apache-2.0
"""reducekit's reduction family against torch in float64 on the same data.

The oracle is torch's op on x.double(). Tolerances (DESIGN.md, Tests), per output:
  amax, amin, argmax, argmin   exact (the same element, the same index)
  sum, mean                    |y - ref| <= rtol |ref| + atol * (sum of |x| over the set, / n for mean)
  var, std, logsumexp          rtol relative to the value itself (+ atol for logsumexp)
  prod                         n units of the accumulator: values near 1 only
  float32 rtol 1e-5 (atol 4e-6); float64 1e-12 (1e-13); fp16/bf16 two units in the last place of
  the float64 result rounded to the dtype, on top of the same float32 atol.
NaN and inf exactly where the oracle has them. conftest.py skips this module, with the reason,
where torch, a GPU or a built reducekit is missing.
"""
import math
import re
from fractions import Fraction

import pytest
import torch

import reducekit
import tolerance

DEV = "cuda"
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HALF = (torch.float16, torch.bfloat16)
OPS = ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std", "var_mean", "std_mean"]
ARG_OPS = ("argmax", "argmin")
EXACT_OPS = ("amax", "amin")
MOMENT_OPS = ("var", "std", "var_mean", "std_mean")
SINGLE_DIM_OPS = ARG_OPS + ("prod",)  # torch's own takes one dim (or None)
ERRORS = (RuntimeError, ValueError, TypeError, IndexError)


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, device=DEV, dtype=torch.float64).to(dtype)


def rk_call(op, x, dim, keepdim=False, correction=1):
    fn = getattr(reducekit, op)
    if op in ARG_OPS and isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            pytest.skip("argmax/argmin take one dim, as torch's")
        dim = dim[0]
    if op in MOMENT_OPS:
        return fn(x, dim, keepdim=keepdim, correction=correction)
    return fn(x, dim, keepdim=keepdim)


def torch_call(op, x, dim, keepdim=False, correction=1):
    """torch's op on x.double(); dim lists for the single-dim ops go through a permuted reshape."""
    x = x.double()
    if op in MOMENT_OPS:
        return getattr(torch, op)(x, dim, keepdim=keepdim, correction=correction)
    if op == "logsumexp" and dim is None:
        dim = list(range(x.dim()))
    if op in SINGLE_DIM_OPS and isinstance(dim, (list, tuple)) and len(dim) != 1:
        return _flattened_call(op, x, dim, keepdim)
    if op in SINGLE_DIM_OPS and isinstance(dim, (list, tuple)):
        dim = dim[0]
    if op in ("amax", "amin") and dim is None:
        dim = ()
    if op == "prod" and dim is None:
        return torch.prod(x).reshape([1] * x.dim() if keepdim else [])
    return getattr(torch, op)(x, dim, keepdim=keepdim)


def _flattened_call(op, x, dims, keepdim):
    """op over several dims: kept dims first, reduced dims flattened last (row-major order)."""
    rank = x.dim()
    reduced = sorted(d % rank for d in dims)
    kept = [d for d in range(rank) if d not in reduced]
    moved = x.permute(kept + reduced).reshape([x.shape[d] for d in kept] + [-1])
    out = getattr(torch, op)(moved, -1)
    if keepdim:
        out = out.reshape([1 if d in reduced else x.shape[d] for d in range(rank)])
    return out


def moments_reference(op, x, dim, keepdim=False, correction=1):
    """var or std of x in float64, accurate where torch's is not.

    torch.var's float64 kernel is a Welford update without a shift, whose error grows with
    |mean| / std (Chan, Golub and LeVeque: about n |mean| / std units of float64 in the worst
    case): test_properties.py caught it 2.6e-12 off, relative, on three values near 1e4, where the
    exact variance (fractions) and reducekit's agreed to 2e-16. Here: the set's minimum p (one of
    its elements, so a constant set gives 0 exactly) is subtracted, then two passes over y = x - p
    with the corrected-two-pass term, var = (sum d^2 - (sum d)^2 / n) / max(0, n - correction) for
    d = y - mean(y). Its relative error: the shift rounds each y by at most u |y| (u = 2^-53), which
    moves sum d^2 by at most 2 u kappa sum d^2 with kappa = sqrt(sum y^2 / sum d^2) <= sqrt(n) (p is in
    the set, so |mean - p| <= sqrt(n - 1) std); the corrected two passes add (L + 3) u plus second
    order terms, L the longest chain of additions in torch's float64 sum (a tree over threads). For
    n <= 2^16: at most (2 * 256 + L + 3) u, under 1e-13 while L < 380, a tenth of the float64 rtol
    below. NaN for a set holding inf or NaN and for an empty set, inf where n <= correction and the
    set is not constant, as torch."""
    xd = x.double()
    if xd.dim() == 0:
        xd, dims, keepdim = xd.reshape(1), [0], False
    else:
        dims = [dim] if isinstance(dim, int) else list(dim or range(xd.dim()))  # None and []: every dim
    n = math.prod(xd.shape[d] for d in dims)
    pivot = xd.amin(dims, keepdim=True) if n else xd.sum(dims, keepdim=True)
    y = xd - pivot
    d = y - y.mean(dims, keepdim=True)
    m2 = (d.square().sum(dims, keepdim=keepdim) - d.sum(dims, keepdim=keepdim).square() / n).clamp_min(0)
    var = m2 / max(0, n - correction)
    out = var.sqrt() if op == "std" else var
    return out.reshape([]) if x.dim() == 0 else out


def reduced_set_stats(x, dim, keepdim):
    """(number of elements per set, sum of |x| over each set) in the output's shape."""
    a = x.double().abs().nan_to_num(posinf=0.0, neginf=0.0)
    dims = list(range(x.dim())) if dim is None or dim == [] or dim == () else dim
    dims = [dims] if isinstance(dims, int) else list(dims)
    n = math.prod(x.shape[d] for d in dims) if x.dim() else 1
    s = a.sum(dims, keepdim=keepdim) if x.dim() else a
    return n, s


def _ulp(t):
    """Distance from |t| to the next representable value of t's dtype, as float64."""
    a = t.abs()
    return (torch.nextafter(a, torch.full_like(a, math.inf)) - a).double()


def assert_close(op, out, ref, dtype, n=1, abs_sum=None):
    """out (in its dtype) against the float64 oracle ref, with op- and dtype-specific tolerance."""
    assert out.shape == ref.shape, f"{op}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    assert out.device.type == "cuda"
    if op in ARG_OPS:
        assert out.dtype == torch.int64
        bad = out != ref
        assert not bool(bad.any()), f"{op}: {int(bad.sum())} indices differ; first got {out[bad][0]}, want {ref[bad][0]}"
        return
    assert out.dtype == dtype, f"{op}: dtype {out.dtype}, expected {dtype}"
    if ref.numel() == 0:
        return
    o = out.double()
    assert torch.equal(o.isnan(), ref.isnan()), f"{op}: NaN pattern differs: got {o[o.isnan() != ref.isnan()][:4]}, " \
                                                f"want {ref[o.isnan() != ref.isnan()][:4]}"
    inf = ref.isinf()
    assert torch.equal(o[inf], ref[inf]), f"{op}: infinities differ"
    finite = ref.isfinite()
    rounded = ref.to(dtype).double()
    if op in EXACT_OPS:
        bad = finite & (o != rounded)
        assert not bool(bad.any()), f"{op}: got {o[bad][:4]}, want {rounded[bad][:4]}"
        return
    rtol, atol = {torch.float32: (1e-5, 4e-6), torch.float64: (1e-12, 1e-13)}.get(dtype, (0.0, 4e-6))
    if op in ("sum", "mean"):
        scale = abs_sum / (n if op == "mean" else 1) if abs_sum is not None else ref.abs()
    elif op == "prod":
        eps = 2.0 ** -52 if dtype == torch.float64 else 2.0 ** -23
        scale, atol = ref.abs(), (n + 1) * eps
    elif op == "logsumexp":
        scale = ref.abs().clamp(min=1.0)
    else:
        scale = ref.abs()
    tol = rtol * ref.abs() + atol * scale
    if dtype in HALF:
        tol = tol + 2 * _ulp(ref.to(dtype))
        # bfloat16 subnormals: a float32 kernel may flush them; below float32's smallest normal anything goes
        tol = tol + (torch.finfo(torch.float32).tiny if dtype == torch.bfloat16 else 0.0)
    err = (o - ref).abs()
    bad = finite & (err > tol) & (o != rounded)
    if bool(bad.any()):
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"{op} ({dtype}): {int(bad.sum())} of {bad.numel()} off; at {i} got {o[i].item()!r}, "
                             f"want {ref[i].item()!r} (tolerance {tol[i].item():.3g})")


def check(op, x, dim, keepdim=False, correction=1):
    """Runs reducekit's op and the float64 oracle on x and compares every output."""
    out = rk_call(op, x, dim, keepdim, correction)
    if op in MOMENT_OPS:  # torch.var's float64 Welford is not accurate enough (moments_reference)
        ref = moments_reference(op[:3], x, dim, keepdim, correction)
    else:
        ref = torch_call(op, x, dim, keepdim, correction)
    n, abs_sum = reduced_set_stats(x, dim, keepdim)
    if op in ("var_mean", "std_mean"):
        assert isinstance(out, tuple) and len(out) == 2
        assert_close(op[:3], out[0], ref, x.dtype, n, abs_sum)
        # The mean output is the true mean, checked against torch.mean in float64: a set holding
        # one inf has mean inf (+inf with -inf, or NaN, gives NaN), where torch.var_mean's Welford
        # update returns NaN (inf - inf inside it). Where both are finite they agree.
        assert_close("mean", out[1], torch_call("mean", x, dim, keepdim), x.dtype, n, abs_sum)
    else:
        assert_close(op, out, ref, x.dtype, n, abs_sum)
    return out


def values(kind, shape, dtype):
    """Test data: randn, 1e4 + randn, values near 1 (for prod), constants; "special" (alone or as
    "near_one+special") adds NaN and +-inf."""
    g = torch.randn(shape, device=DEV, dtype=torch.float64)
    if kind == "large_mean":
        g = 1e4 + g
    elif kind.startswith("near_one"):
        g = 1 + g / 64
    elif kind == "constant":
        g = torch.full(shape, 3.25, device=DEV, dtype=torch.float64)
    x = g.to(dtype)
    if kind.endswith("special") and x.numel() > 0:
        flat = x.view(-1)
        n = flat.numel()
        flat[0] = math.nan
        flat[n // 3] = math.inf
        flat[n // 2] = -math.inf
        flat[n - 1] = -math.inf
        flat[(2 * n) // 3] = math.nan
    return x


def kind_for(op, kind):
    # long products of randn under- or overflow part-way, and whether inf then meets 0 (NaN) depends
    # on the order of the factors: prod gets values near 1
    if op != "prod" or kind == "constant":
        return kind
    return "near_one+special" if kind == "special" else "near_one"


# ----------------------------------------------------------------------------- the three paths

ROW_LENGTHS = [1, 3, 33, 1000, 2045, 2048, 4099, 70001]


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_rows(op, dtype, n):
    m = max(2, min(67, 2**20 // n))
    x = values(kind_for(op, "randn"), (m, n), dtype)
    before = x.clone()
    check(op, x, -1)
    assert torch.equal(x, before), "the input was modified"


@pytest.mark.parametrize("k,n", [(1, 5), (7, 2), (7, 33), (300, 33), (300, 300), (4099, 40), (513, 5000)])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_columns(op, dtype, k, n):
    check(op, values(kind_for(op, "randn"), (k, n), dtype), 0)


@pytest.mark.parametrize("shape", [(1,), (5,), (1000,), (4096,), (16389,), (2**20 + 3,), (3, 7, 11), (64, 1025)])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_all(op, dtype, shape):
    x = values(kind_for(op, "randn"), shape, dtype)
    if op == "prod" and x.numel() > 4096:
        x = x[..., :8]  # a product of a million values near 1 still drifts far from 1
    check(op, x, None)
    check(op, x, None, keepdim=True)


@pytest.mark.parametrize("shape,dim", [((4, 6, 9), [0, 2]), ((4, 6, 9), [1, 2]), ((4, 6, 9), [0, 1]),
                                       ((4, 6, 9), (-1, 0)), ((4, 6, 9), [2, 1, 0]), ((3, 257, 70), [1]),
                                       ((3, 257, 70), -2), ((2, 3, 4, 5), [1, 3]), ((5, 1, 7), [1])])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_dim_lists_and_keepdim(op, dtype, shape, dim, keepdim):
    check(op, values(kind_for(op, "randn"), shape, dtype), dim, keepdim)


def _layout(case, n):
    """(x, dim) for one layout case with reduced extent n."""
    if case == "sliced_rows":  # row stride n + 5: no vector width divides it
        return randn(9, n + 5)[:, :n], -1
    if case == "offset_base":  # misaligned base pointer
        return randn(9 * n + 1)[1:].view(9, n), -1
    if case == "transposed_last":  # reduce the logical last dim, stride 9
        return randn(n, 9).t(), -1
    if case == "transposed_first":  # reduce dim 0 of a transposed matrix: a row in memory
        return randn(9, n).t(), 0
    if case == "sliced_columns":  # column path on a slice that starts 3 elements in
        return randn(n, 70)[:, 3:40], 0
    if case == "channels_last":  # [N, C, H, W] in NHWC memory, per-channel statistics
        return randn(2, 5, 3, n).permute(0, 3, 1, 2), [0, 2, 3]
    if case == "expanded":  # stride-0 along the reduced dim
        return randn(5, 1).expand(5, n), -1
    if case == "strided_reduced":  # every other element
        return randn(7, 2 * n)[:, ::2], -1
    raise ValueError(case)


LAYOUTS = ["sliced_rows", "offset_base", "transposed_last", "transposed_first", "sliced_columns", "channels_last",
           "expanded", "strided_reduced"]


@pytest.mark.parametrize("n", [33, 1000, 4099])
@pytest.mark.parametrize("case", LAYOUTS)
@pytest.mark.parametrize("op", OPS)
def test_layouts(op, case, n):
    x, dim = _layout(case, n)
    if op == "prod":
        x = 1 + x / 64
    check(op, x, dim)
    check(op, x.to(torch.bfloat16), dim)


# ----------------------------------------------------------------------------- values

@pytest.mark.parametrize("kind", ["special", "constant", "large_mean"])
@pytest.mark.parametrize("path", ["row", "column", "all"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_special_values(op, dtype, path, kind):
    if kind == "large_mean" and dtype == torch.float16:
        pytest.skip("1e4 + randn has no digits left in float16")
    shape, dim = {"row": ((33, 1000), -1), "column": ((1000, 33), 0), "all": ((5, 999), None)}[path]
    x = values(kind_for(op, kind), shape, dtype)
    out = check(op, x, dim)
    if kind == "constant" and op in ("var", "std"):
        assert bool((out == 0).all()), "a constant set has variance exactly 0"


def test_nan_rules():
    x = torch.tensor([[1.0, math.nan, 3.0, math.nan], [2.0, 5.0, 5.0, 1.0], [-math.inf, -math.inf, -math.inf, -math.inf]],
                     device=DEV)
    assert reducekit.amax(x, 1)[0].isnan() and reducekit.amin(x, 1)[0].isnan()
    assert reducekit.argmax(x, 1).tolist() == [1, 1, 0], "first NaN, then the first of tied maxima"
    assert reducekit.argmin(x, 1).tolist() == [1, 3, 0]
    assert reducekit.logsumexp(x, 1)[2].item() == -math.inf, "all -inf gives -inf"
    assert reducekit.sum(x, 1)[0].isnan()


@pytest.mark.parametrize("path", ["row", "column", "all"])
def test_large_mean_variance_accuracy(path):
    # 1e4 + randn in float32: relative error of var under 1e-4 (the spread is 1e-4 of the mean)
    shape, dim = {"row": ((8, 100003), -1), "column": ((4099, 40), 0), "all": ((2**21,), None)}[path]
    x = 1e4 + torch.randn(shape, device=DEV)
    got = reducekit.var(x, dim).double()
    want = torch.var(x.double(), dim)
    assert float(((got - want).abs() / want).max()) < 1e-4


# test_properties.py's shrunk case (values as it printed them, to 4 decimals): [3, 1, 5] float64
# near 1e4, var over dim 0. torch.var's float64 Welford, the oracle then, was 2.6e-12 off (relative)
# in column 0; the float64 tolerance is 1.1e-12. The same Welford on these printed values is 2.1e-12
# off there (emulated on the CPU); the exact variance is computed here with fractions.
NEAR_1E4 = [[9999.6896, 9999.9657, 10000.1756, 9997.7196, 10000.5039],
            [10000.5596, 9999.9250, 10000.9691, 9999.7643, 9999.5418],
            [10000.5661, 10001.2851, 9998.1333, 9999.9688, 10001.2433]]


def _exact_var(values, correction=1):
    f = [Fraction(v) for v in values]
    mean = sum(f) / len(f)
    return float(sum((v - mean) ** 2 for v in f) / (len(f) - correction))


@pytest.mark.parametrize("op", ["var", "var_mean", "std"])
def test_float64_variance_near_1e4_is_exact(op):
    x = torch.tensor(NEAR_1E4, device=DEV, dtype=torch.float64).view(3, 1, 5)
    exact = torch.tensor([_exact_var(x[:, 0, j].tolist()) for j in range(5)], device=DEV, dtype=torch.float64)
    ref = moments_reference(op[:3], x, 0)
    want = exact.sqrt() if op == "std" else exact
    oracle_err = ((ref.view(5) - want) / want).abs().max().item()
    assert oracle_err < 1e-14, f"moments_reference is {oracle_err:.3g} off the exact {op}, relative"
    out = rk_call(op, x, 0)
    got = (out[0] if isinstance(out, tuple) else out).view(5)
    err = ((got - want) / want).abs()
    assert float(err.max()) <= 1.1e-12, \
        f"{op}: {got.tolist()} against the exact {want.tolist()}: relative {err.tolist()}"
    check(op, x, 0)


# test_properties.py's shrunk case: float16 values of magnitude 32752 .. 65504 (var 2.7e9, itself
# inf in float16; std 51822), var and std over every dim. The backward formulas ran in float16:
# x - mean reached 62336 + 5737 = inf, and 2 std = inf, so var's gradient held -inf and std's NaN
# where torch's float64 gradient is -13760 and 0.13. They compute in float32 now.
NEAR_MAX_F16 = [-44608., -60608., 37184., -62816., 42880., 36256., -48192., 57760., -47072., -36224., 62336.]


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("values,shape,dim", [(NEAR_MAX_F16, [1, 1, 1, 1, 1, 1, 11], None),
                                              ([60000., -50000.], [2], 0)],  # std 77782: inf in float16
                         ids=["near_max", "std_overflows"])
def test_float16_moment_gradients_stay_finite(op, values, shape, dim):
    x = torch.tensor(values, device=DEV, dtype=torch.float16).view(shape)
    xa, xb = x.clone().requires_grad_(), x.double().requires_grad_()
    outs_a, outs_b = _outputs(rk_call(op, xa, dim)), _outputs(torch_call(op, xb, dim))
    gs = [torch.full_like(o, -0.25) for o in outs_a]  # var's gradient stays within float16
    torch.autograd.backward(outs_a, gs)
    torch.autograd.backward(outs_b, [g.double() for g in gs])
    # one rounding to float16 at the end, float32 before it: 4 ulp of float16 and 1e-5 relative
    tolerance.assert_close(xa.grad, xb.grad, torch.float16, xb.grad.abs(), f"{op} dx of {values}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_logsumexp_gradient_at_large_magnitude(dtype):
    """The property suite's case: a 16-bit logsumexp of 1021 values of 9984 rounds to 9984
    (bfloat16) or 9992 (float16), 6.9 or 1.1 off, and exp(x - y) from that y gave g or g / 2.9
    where g / 1021 is right. The backward forms y in float32: one 16-bit rounding at the end."""
    x = torch.full((1021,), 9984.0, device=DEV, dtype=dtype, requires_grad=True)
    g = torch.tensor(-0.0296, device=DEV, dtype=dtype)
    reducekit.logsumexp(x, None).backward(g)
    want = (g.double() / 1021).expand(1021)
    tolerance.assert_close(x.grad, want, dtype, want.abs(), f"logsumexp dx {dtype}")


def test_no_overflow_where_the_variance_is_finite():
    x = 5e18 * torch.randn(7, 5000, device=DEV)  # var ~ 2.5e37, squares of single deviations near float32's max
    check("var", x, -1)
    check("std", x.t(), 0)
    check("var", x, None)


@pytest.mark.parametrize("correction", [0, 1, 2, 7.5])
@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("op", MOMENT_OPS)
def test_correction(op, n, correction):
    # n - correction <= 0 gives inf (spread > 0) or NaN (one element), as torch
    check(op, randn(4, n), -1, correction=correction)


def test_legacy_unbiased_forms():
    x = randn(6, 50)
    assert torch.equal(reducekit.var(x, 1, False), reducekit.var(x, 1, correction=0))
    assert torch.equal(reducekit.std(x, True), reducekit.std(x, correction=1))
    assert torch.equal(reducekit.var_mean(x, [0], unbiased=False)[0], reducekit.var(x, 0, correction=0))
    with pytest.raises(TypeError, match="correction"):
        reducekit.var(x, 1, True, correction=0)


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("dtype,out_dtype", [(torch.float16, torch.float32), (torch.bfloat16, torch.float64),
                                             (torch.float32, torch.float64), (torch.float32, torch.float16)])
def test_output_dtype(op, dtype, out_dtype):
    x = randn(33, 1000, dtype=dtype)
    out = getattr(reducekit, op)(x, 1, dtype=out_dtype)
    ref = getattr(torch, op)(x.double(), 1)
    n, abs_sum = reduced_set_stats(x, 1, False)
    assert_close(op, out, ref, out_dtype, n, abs_sum)


# ----------------------------------------------------------------------------- zero sizes

@pytest.mark.parametrize("shape,dim", [((0, 5), 1), ((5, 0), 1), ((5, 0), 0), ((3, 0, 4), 1), ((0,), None),
                                       ((2, 0), None), ((0, 3), [0, 1])])
@pytest.mark.parametrize("op", OPS)
def test_zero_size(op, shape, dim):
    x = randn(*shape)
    empty_set = math.prod(shape[d] for d in ([dim] if isinstance(dim, int) else (dim or range(len(shape))))) == 0
    if op in ARG_OPS + EXACT_OPS and empty_set:
        if op in ARG_OPS and isinstance(dim, list):
            pytest.skip("argmax takes one dim")
        # torch's types: IndexError, but amax/amin over every dim give a RuntimeError
        error = IndexError if op in ARG_OPS or dim is not None else RuntimeError
        with pytest.raises(error, match=r"dim"):
            rk_call(op, x, dim)
        return
    if op in ARG_OPS and isinstance(dim, list):
        pytest.skip("argmax takes one dim")
    check(op, x, dim)
    check(op, x, dim, keepdim=True)


def test_empty_set_values():
    x = randn(3, 0)
    assert reducekit.sum(x, 1).tolist() == [0, 0, 0]
    assert reducekit.prod(x, 1).tolist() == [1, 1, 1]
    assert reducekit.mean(x, 1).isnan().all()
    assert reducekit.var(x, 1).isnan().all()
    assert (reducekit.logsumexp(x, 1) == -math.inf).all()


def test_scalar_input():
    x = torch.tensor(2.5, device=DEV)
    for op in OPS:
        for dim in (None, 0, -1):
            if op in MOMENT_OPS and dim is None:
                continue  # torch warns about n - correction <= 0 there; covered by test_correction
            check(op, x, dim)


# ----------------------------------------------------------------------------- determinism, invariance

INVARIANCE_OPS = ["sum", "amax", "argmax", "logsumexp", "var_mean", "prod"]


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


def _bits(out):
    return torch.cat([o.reshape(-1) for o in _outputs(out)])


@pytest.mark.parametrize("n", [7, 1000, 4099, 70001])
@pytest.mark.parametrize("op", INVARIANCE_OPS)
def test_rows_deterministic_and_batch_invariant(op, n):
    m = 512 if n < 10000 else 16
    x = values(kind_for(op, "randn"), (m, n), torch.float32)
    batch = _outputs(rk_call(op, x, -1))
    rk_call(op, randn(3, 2 * n + 1), -1)  # other work in between must not matter
    assert all(torch.equal(a, b) for a, b in zip(batch, _outputs(rk_call(op, x, -1)))), "two runs differ"
    for i in sorted({0, 1, m // 2, m - 1}):
        alone = _outputs(rk_call(op, x[i:i + 1].clone(), -1))
        assert all(torch.equal(a, b[i:i + 1]) for a, b in zip(alone, batch)), f"row {i} alone differs from the batch"


@pytest.mark.parametrize("op", INVARIANCE_OPS)
def test_columns_batch_invariant(op):
    # 20000 columns reduce in one CTA per (tile, group of segments); a 64-column slice in one CTA per
    # segment; one column is a column of inner extent 1: the same bits each way (2600 rows: 11
    # segments, not a multiple of the 8 groups)
    x = values(kind_for(op, "randn"), (2600, 20000), torch.float32)
    full = _outputs(rk_call(op, x, 0))
    for width in (64, 1):
        for first in (0, 4096, 7777):
            for f, p in zip(full, _outputs(rk_call(op, x[:, first:first + width], 0))):
                assert torch.equal(f[first:first + width], p), \
                    f"columns {first}..+{width} differ from the same columns among 20000"


@pytest.mark.parametrize("op", INVARIANCE_OPS)
def test_columns_batch_invariant_across_work_splits(op):
    # [520, 2100, 32] over dim 1 (9 segments): 520 outer slices reduce in one CTA per tile walking
    # every segment; 1 or 100 slices in one CTA per segment with a last-CTA fold: the same bits
    x = values(kind_for(op, "randn"), (520, 2100, 32), torch.float32)
    full = _outputs(rk_call(op, x, 1))
    for first, count in ((0, 1), (333, 100), (419, 100)):
        for f, p in zip(full, _outputs(rk_call(op, x[first:first + count], 1))):
            assert torch.equal(f[first:first + count], p), \
                f"outer slices {first}..+{count} differ from the same slices among 520"


@pytest.mark.parametrize("op", INVARIANCE_OPS)
def test_all_deterministic(op):
    x = values(kind_for(op, "randn"), (2**22 + 17,), torch.bfloat16)
    assert torch.equal(_bits(rk_call(op, x, None)), _bits(rk_call(op, x, None)))


# ----------------------------------------------------------------------------- gradients

GRAD_OPS = ["sum", "mean", "prod", "amax", "amin", "logsumexp", "var", "std", "var_mean", "std_mean"]


@pytest.mark.parametrize("shape,dim", [((3, 7), -1), ((4, 5, 3), [0, 2]), ((6,), None), ((5, 3), 0), ((2, 1, 4), 1)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", GRAD_OPS)
def test_gradcheck(op, shape, dim, keepdim):
    x = (randn(*shape, dtype=torch.float64) + (3 if op == "prod" else 0)).requires_grad_()
    dims = range(len(shape)) if dim is None else [dim] if isinstance(dim, int) else dim
    count = math.prod(shape[d] for d in dims)
    # One element with correction 1 has variance NaN, which no finite difference can check;
    # correction 0 keeps such a set in the test (variance 0, gradient 0).
    correction = 0 if count == 1 else 1

    def f(t):
        return rk_call(op, t, dim, keepdim, correction)

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("op", GRAD_OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_backward_matches_torch(op, dtype):
    x0 = randn(6, 40, dtype=dtype)
    if op == "prod":
        x0 = 1 + x0 / 64
    xa, xb = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    outs_a = _outputs(rk_call(op, xa, 1))
    outs_b = _outputs(getattr(torch, op)(xb, 1))
    grads = [torch.randn_like(o) for o in outs_a]
    torch.autograd.backward(outs_a, grads)
    torch.autograd.backward(outs_b, grads)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(xa.grad, xb.grad, **tol)


# ----------------------------------------------------------------------------- PyTorch integration

def _raw_args(op, x):
    if op in ARG_OPS:
        return (x, 1, False)
    if op in MOMENT_OPS:
        return (x, [1], 1.0, False)
    return (x, [1], False)


@pytest.mark.parametrize("shape", [(8, 33), (4, 5, 6)])
@pytest.mark.parametrize("op", OPS)
def test_opcheck(op, shape):
    x = randn(*shape).requires_grad_()
    torch.library.opcheck(getattr(torch.ops.reducekit, op).default, _raw_args(op, x))


def test_opcheck_dtype_keyword():
    x = randn(8, 33).requires_grad_()
    torch.library.opcheck(torch.ops.reducekit.sum.default, (x, [0], True), {"dtype": torch.float64})


@pytest.mark.parametrize("op", OPS)
def test_compile_fullgraph(op):
    # Each op is a new closure over the same code object: without a reset the recompiles of
    # earlier parametrizations count against dynamo's recompile limit.
    torch._dynamo.reset()

    def f(x):
        out = rk_call(op, x * 2, [1] if op not in ARG_OPS else 1)
        return tuple(o + 1 for o in out) if isinstance(out, tuple) else out + 1

    compiled = torch.compile(f, fullgraph=True)
    x = randn(6, 1000, 3)
    got, want = compiled(x), f(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.equal(g, w)


def test_compile_dynamic_and_backward():
    def loss(x):
        v, m = reducekit.var_mean(x, 0)
        return reducekit.sum(v * m) + reducekit.logsumexp(x, [1]).mean() + reducekit.amax(x, 1).sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for shape in [(8, 100), (16, 333)]:
        x0 = randn(*shape)
        xa, xb = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        loss(xa).backward()
        compiled(xb).backward()
        torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,shape,dim", [("sum", (2**20 + 3,), None), ("var_mean", (16, 2**20), -1),
                                          ("argmax", (4096, 128), 0), ("amax", (64, 300), [0, 1])])
def test_cuda_graph(op, shape, dim):
    # workspace and its clearing come from the caching allocator and the stream: capture works
    x = randn(*shape)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        rk_call(op, x, dim)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = rk_call(op, x, dim)
    x.copy_(randn(*shape))
    graph.replay()
    graph.replay()  # tickets left zeroed by the first replay
    torch.cuda.synchronize()
    assert torch.equal(_bits(out), _bits(rk_call(op, x, dim)))


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("op", OPS)
def test_rejects_bad_dims(op):
    # out of range: torch's IndexError and words; repeated: a RuntimeError, as torch's
    def out_of_range(low, high, dim):
        return re.escape(f"Dimension out of range (expected to be in range of [{low}, {high}], but got {dim})")

    x = randn(3, 4)
    with pytest.raises(IndexError, match=out_of_range(-2, 1, 2)):
        rk_call(op, x, 2)
    with pytest.raises(IndexError, match=out_of_range(-2, 1, -3)):
        rk_call(op, x, -3)
    with pytest.raises(IndexError, match=out_of_range(-1, 0, 1)):
        rk_call(op, randn(), 1)
    raw = getattr(torch.ops.reducekit, op)
    with pytest.raises(IndexError, match=r"^Dimension out of range"):
        raw(x, 5 if op in ARG_OPS else [0, 5], *_raw_args(op, x)[2:])
    with pytest.raises(IndexError, match=r"^Dimension out of range"):
        raw(torch.empty(3, 4, device="meta"), 5 if op in ARG_OPS else [0, 5], *_raw_args(op, x)[2:])
    if op not in ARG_OPS:
        with pytest.raises(RuntimeError, match=r"dim"):
            rk_call(op, x, [1, -1])
        with pytest.raises(RuntimeError, match=r"dim"):
            raw(*_raw_args(op, x)[:1], [0, 0], *_raw_args(op, x)[2:])


@pytest.mark.parametrize("op", ARG_OPS + EXACT_OPS)
def test_empty_set_error_names_the_dim(op):
    # torch's IndexError and words (ATen's zero_numel_check_dims), on CUDA and meta tensors
    for device in (DEV, "meta"):
        with pytest.raises(IndexError, match=re.escape(f"{op}(): Expected reduction dim 1 to have non-zero size.")):
            rk_call(op, torch.empty(3, 0, device=device), 1)


@pytest.mark.parametrize("op", OPS)
def test_rejects_integer_and_cpu_tensors(op):
    with pytest.raises(ERRORS, match=r"\bx\b"):
        rk_call(op, torch.arange(12, device=DEV).view(3, 4), 1)
    with pytest.raises(ERRORS, match=r"(?i)\bx\b|cuda|\bcpu\b"):
        rk_call(op, torch.randn(3, 4), 1)


def test_rejects_integer_output_dtype():
    # named as dtype (the output made from it used to take the blame)
    for op in ("sum", "mean"):
        with pytest.raises(RuntimeError, match=rf"^dtype: int32 is not supported; {op} returns"):
            getattr(reducekit, op)(randn(3, 4), 1, dtype=torch.int32)
        with pytest.raises(RuntimeError, match=rf"^dtype: int32 is not supported; {op} returns"):
            getattr(reducekit, op)(torch.empty(3, 4, device="meta"), 1, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"^dtype: int64 is not supported; prod computes in"):
        reducekit.prod(randn(3, 4), 1, dtype=torch.int64)


# ----------------------------------------------------------------------------- over 2^31 elements

@pytest.mark.large
def test_more_than_2_31_elements():
    n = 2**31 + 1024
    if torch.cuda.mem_get_info()[0] < 3 * n * 2:
        pytest.skip(f"needs {3 * n * 2 / 2**30:.1f} GiB of free GPU memory")
    x = torch.ones(n, device=DEV, dtype=torch.bfloat16)
    x[-1] = 7.0
    assert reducekit.sum(x, dtype=torch.float64).item() == n + 6  # float64 accumulation: exact
    assert reducekit.argmax(x).item() == n - 1
    rows = x[: 2**31].view(2**21, 1024)  # the last row starts past 2^31 - 1024
    assert reducekit.amax(rows, 0).tolist() == [1.0] * 1024
    assert reducekit.sum(rows, 1)[-1].item() == 1024


# ----------------------------------------------------------------------------- random shapes (optional)

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # hypothesis is optional: the cases above cover the plan
    st = None

if st is not None:
    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_random_shapes(data):
        rank = data.draw(st.integers(1, 4), label="rank")
        sizes = [data.draw(st.sampled_from([1, 2, 3, 5, 8, 17, 33, 130, 1000]), label="size") for _ in range(rank)]
        while math.prod(sizes) > 2**20:
            sizes[sizes.index(max(sizes))] //= 2
        perm = data.draw(st.permutations(range(rank)), label="perm")
        dims = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank), label="dims")
        keepdim = data.draw(st.booleans(), label="keepdim")
        dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        op = data.draw(st.sampled_from(OPS), label="op")
        if op in ARG_OPS:
            dims = dims[:1]
        dim = (dims[0] if op in ARG_OPS else dims) if dims else None
        gen = torch.Generator(device=DEV).manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
        base = torch.randn(*[sizes[p] for p in perm], device=DEV, generator=gen, dtype=torch.float64)
        if op == "prod":
            base = 1 + base / 64
        x = base.to(dtype).permute(*[list(perm).index(i) for i in range(rank)])
        check(op, x, dim, keepdim)
