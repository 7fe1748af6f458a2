# SPDX-License-Identifier: Apache-2.0
"""reducekit layer_norm / rms_norm (plain and fused residual) against torch in float64.

The oracle is torch's layer_norm / rms_norm of the inputs cast to float64 (weight and bias too);
gradients likewise through torch.autograd in float64. Tolerance: the error allowed on an output
is 4 ulp of its dtype at its own magnitude plus an absolute term, 1e-5 (float32 math; 1e-12 for
float64) times the magnitude of the terms behind it (|x| * rstd * |w| + |b| for y, which is what
x - mean rounds at). conftest.py skips this module, with the reason, where torch, a GPU or a
built reducekit is missing.
"""
import pytest
import torch

import reducekit
from tolerance import assert_close

DEV = "cuda"
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HALF = (torch.float16, torch.bfloat16)
# 24576 / 24577: the wide rows (one 1024-thread CTA a row), of whole vectors and ragged; 1024 / 4096:
# 16-bit layer_norm's whole wide rows of one and four warps.
LENGTHS = [1, 2, 3, 31, 33, 127, 781, 1000, 1024, 2045, 4096, 4099, 12800, 24576, 24577, 40009, 65537, 2**18]


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def rows_for(n):
    return 37 if n <= 4096 else max(3, 2**20 // n)


def make_params(shape, param_dtype, weight=True, bias=True):
    w = (1 + 0.5 * torch.randn(shape, device=DEV)).to(param_dtype) if weight else None
    b = torch.randn(shape, device=DEV).to(param_dtype) if bias else None
    return w, b


def torch_norm(kind, x, shape, w, b, eps):
    """The float64 oracle; rms_norm's bias (torch's rms_norm has none) as the composition
    F.rms_norm(x, shape, w, eps) + b."""
    x, w = x.double(), (w.double() if w is not None else None)
    if kind == "layer_norm":
        return torch.nn.functional.layer_norm(x, shape, w, b.double() if b is not None else None, eps)
    y = torch.nn.functional.rms_norm(x, shape, w, eps)
    return y + b.double() if b is not None else y


def y_scale(x, shape, w, b, centered=True):
    """|x| * rstd * |w| + |b| per element, the magnitude the output's rounding follows. centered
    (layer_norm): x - mean also carries the float32 mean's error, which scales with the row's mean
    |x|, not with |x| or |mean| (an element near a mean near 0 still gets it), so mean |x| joins |x|."""
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    xd = x.double()
    rstd = 1 / (xd.var(dims, unbiased=False, keepdim=True) + 1e-5).sqrt() if xd.shape[-1] > 0 else 1.0
    magnitude = xd.abs()
    if centered and xd.numel() > 0:
        magnitude = magnitude + xd.abs().mean(dims, keepdim=True)
    s = magnitude * rstd * (w.double().abs() if w is not None else 1)
    return s + (b.double().abs() if b is not None else 0)


def param_dtypes(dtype):
    return [dtype, torch.float32] if dtype in HALF else [dtype]


# ----------------------------------------------------------------------------- forward

@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", LENGTHS)
def test_forward(kind, dtype, n):
    for pdt in param_dtypes(dtype):
        x = torch.randn(rows_for(n), n, device=DEV).to(dtype)
        w, b = make_params([n], pdt, bias=kind == "layer_norm")
        eps = 1e-5
        if kind == "layer_norm":
            out = reducekit.layer_norm(x, [n], w, b, eps)
        else:
            out = reducekit.rms_norm(x, [n], w, eps)
        assert_close(out, torch_norm(kind, x, [n], w, b, eps), dtype, y_scale(x, [n], w, b, kind == "layer_norm"),
                     f"{kind} params {pdt}")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_forward_cases(kind, dtype):
    """Multi-dim normalized_shape, no weight/bias, constant rows, large means, sliced inputs."""
    fn = reducekit.layer_norm if kind == "layer_norm" else reducekit.rms_norm
    x = torch.randn(5, 6, 7, 33, device=DEV).to(dtype)
    for shape in ([33], [7, 33], [6, 7, 33]):
        ref = torch_norm(kind, x, shape, None, None, 1e-5)
        assert_close(fn(x, shape, None, eps=1e-5), ref, dtype, y_scale(x, shape, None, None), f"shape {shape}")
    c = torch.full((9, 1000), 3.25, device=DEV).to(dtype)
    c[::2] = torch.randn(5, 1000, device=DEV).to(dtype)
    assert_close(fn(c, [1000], None, eps=1e-5), torch_norm(kind, c, [1000], None, None, 1e-5), dtype,
                 y_scale(c, [1000], None, None), "constant rows")
    big = (1e3 + torch.randn(9, 4099, device=DEV)).to(dtype)
    assert_close(fn(big, [4099], None, eps=1e-5), torch_norm(kind, big, [4099], None, None, 1e-5), dtype,
                 y_scale(big, [4099], None, None), "large mean")
    wide = torch.randn(11, 3000, device=DEV).to(dtype)
    sliced = wide[:, 7:2052]  # rows of a wider buffer, base offset by 7 elements
    w, _ = make_params([2045], dtype, bias=False)
    assert_close(fn(sliced, [2045], w, eps=1e-5), torch_norm(kind, sliced, [2045], w, None, 1e-5), dtype,
                 y_scale(sliced, [2045], w, None), "sliced")
    transposed = torch.randn(64, 40, device=DEV).to(dtype).t()  # normalized dim not innermost: copied
    assert_close(fn(transposed, [64], None, eps=1e-5), torch_norm(kind, transposed, [64], None, None, 1e-5), dtype,
                 y_scale(transposed, [64], None, None), "transposed")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [64, 4096, 50001])
def test_forward_non_finite_rows(kind, dtype, n):
    """Rows holding +inf, -inf or NaN are NaN throughout, as torch's (layer_norm: the variance is
    NaN; rms_norm: the mean square is inf or NaN, no finite scale); the finite row beside them is
    unaffected."""
    fn = reducekit.layer_norm if kind == "layer_norm" else reducekit.rms_norm
    x = torch.randn(4, n, device=DEV).to(dtype)
    x[0, n // 3], x[1, 5], x[2, n - 1] = float("inf"), float("-inf"), float("nan")
    out = fn(x, [n], None, eps=1e-5)
    ref = torch_norm(kind, x, [n], None, None, 1e-5)
    assert torch.equal(out.isnan(), ref.isnan()), f"NaN at {(out.isnan() != ref.isnan()).nonzero()[:5].tolist()}"
    assert torch.equal(out.isinf(), ref.isinf()), f"inf at {(out.isinf() != ref.isinf()).nonzero()[:5].tolist()}"
    assert_close(out[3:], ref[3:], dtype, y_scale(x[3:], [n], None, None), "the finite row")


def _empty_view(case, dtype):
    """Tensors with no elements, as torch lays them out: test_properties.py's shrunk cases first."""
    if case == "rows_sliced":  # [0, 2] sliced from [0, 3] with a step of 2: strides (3, 2)
        return torch.randn(0, 3, device=DEV).to(dtype)[:, ::2], [2]
    if case == "zero_in_normalized":  # [2, 0] over [2, 0]: torch's strides (1, 1)
        return torch.randn(2, 0, device=DEV).to(dtype), [2, 0]
    if case == "zero_rows":  # [0, 5] over [5]
        return torch.randn(0, 5, device=DEV).to(dtype), [5]
    if case == "zero_columns":  # [3, 0] over [0]: three rows of nothing
        return torch.randn(3, 0, device=DEV).to(dtype), [0]
    if case == "transposed":  # [4, 0, 3] over [0, 3], a permuted view
        return torch.randn(3, 0, 4, device=DEV).to(dtype).permute(2, 1, 0), [0, 3]
    raise ValueError(case)


EMPTY_CASES = ["rows_sliced", "zero_in_normalized", "zero_rows", "zero_columns", "transposed"]


@pytest.mark.parametrize("case", EMPTY_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"])
def test_empty_tensors(kind, dtype, case):
    """A tensor with no elements gives empty outputs and gradients (dweight / dbias: zeros, a sum
    over no rows), as torch's, whatever its strides: test_properties.py found rms_norm of a [0, 2]
    slice and of [2, 0] over [2, 0] refused as 'x: the normalized dims must be dense'."""
    x, shape = _empty_view(case, dtype)
    r = torch.randn(x.shape, device=DEV).to(dtype) if kind.startswith("add_") else None
    w, b = make_params(shape, torch.float32 if dtype in HALF else dtype, bias="layer" in kind)
    base = kind.removeprefix("add_")

    def ours(x, r, w, b):
        if kind == "layer_norm":
            return reducekit.layer_norm(x, shape, w, b, 1e-5)
        if kind == "rms_norm":
            return reducekit.rms_norm(x, shape, w, 1e-5)
        if kind == "add_layer_norm":
            return reducekit.add_layer_norm(x, r, shape, w, b, 1e-5)
        return reducekit.add_rms_norm(x, r, shape, w, 1e-5)

    out = ours(x, r, w, b)
    y, s = out if isinstance(out, tuple) else (out, None)
    assert y.dtype == dtype and y.shape == x.shape, f"y: {y.dtype} {tuple(y.shape)} for x {dtype} {tuple(x.shape)}"
    if s is not None:
        assert s.dtype == dtype and s.shape == x.shape, f"s: {s.dtype} {tuple(s.shape)} for x {tuple(x.shape)}"
    dy = torch.randn(x.shape, device=DEV).to(dtype)
    got = grads(ours, [x, r, w, b], dy)
    ref = grads(lambda x, w, b: torch_norm(base, x, shape, w, b, 1e-5),
                [x.double(), w.double(), b.double() if b is not None else None], dy.double())
    for name, g, want in (("dx", got[0], ref[0]), ("dresidual", got[1], ref[0] if r is not None else None),
                          ("dweight", got[2], ref[1]), ("dbias", got[3], ref[2])):
        if want is None:
            assert g is None, f"{name}: a gradient where none is wanted"
            continue
        assert g is not None and g.shape == want.shape, \
            f"{name}: shape {None if g is None else tuple(g.shape)}, expected {tuple(want.shape)}"
        assert torch.equal(g.double(), want), \
            f"{name}: {g.flatten()[:8].tolist()}, torch's {want.flatten()[:8].tolist()}"


def test_rms_norm_default_eps():
    x = torch.randn(4, 64, device=DEV, dtype=torch.bfloat16) * 1e-3
    ref = torch.nn.functional.rms_norm(x.double(), [64], None, torch.finfo(torch.bfloat16).eps)
    assert_close(reducekit.rms_norm(x, [64]), ref, torch.bfloat16, y_scale(x, [64], None, None), "eps=None")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [1, 33, 4099, 2**18])
def test_fused_residual(kind, dtype, n):
    for pdt in param_dtypes(dtype):
        x = torch.randn(rows_for(n), n, device=DEV).to(dtype)
        r = torch.randn_like(x)
        w, b = make_params([n], pdt, bias=kind == "layer_norm")
        if kind == "layer_norm":
            y, s = reducekit.add_layer_norm(x, r, [n], w, b, 1e-5)
        else:
            y, s = reducekit.add_rms_norm(x, r, [n], w, 1e-5)
        assert torch.equal(s, x + r), "s must be x + residual in x's dtype"
        assert_close(y, torch_norm(kind, x + r, [n], w, b, 1e-5), dtype, y_scale(x + r, [n], w, b, "layer" in kind), "y")


def test_deterministic_and_batch_invariant():
    for n in (1000, 4096, 2**18):
        rows = 24 if n == 2**18 else 2048
        x = torch.randn(rows, n, device=DEV, dtype=torch.bfloat16)
        w, b = make_params([n], torch.float32)
        y = reducekit.layer_norm(x, [n], w, b)
        assert torch.equal(y, reducekit.layer_norm(x, [n], w, b)), "two runs differ"
        for r in (0, rows // 2 + 1, rows - 1):
            assert torch.equal(reducekit.layer_norm(x[r:r + 1], [n], w, b), y[r:r + 1]), f"row {r} alone differs"


# ----------------------------------------------------------------------------- split rows (workspace)
# 16-bit rows of 2**20 elements and more split into chunks over a cooperative grid, as softmax's do
# (the torch op gives the workspace; every call leaves its arrival counters zero again).

def norm_y(kind, fused, x, r, w, b):
    n = [x.shape[-1]]
    if fused:
        out = reducekit.add_layer_norm(x, r, n, w, b, 1e-5) if kind == "layer_norm" else reducekit.add_rms_norm(
            x, r, n, w, 1e-5)
        return out[0]
    return reducekit.layer_norm(x, n, w, b, 1e-5) if kind == "layer_norm" else reducekit.rms_norm(x, n, w, 1e-5)


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
def test_split_rows(kind, fused, dtype):
    n = 2**20 + 5  # odd: rows past the first start off 16-byte alignment
    x = torch.randn(5, n, device=DEV).to(dtype)
    r = torch.randn_like(x) if fused else None
    w, b = make_params([n], torch.float32, bias=kind == "layer_norm")
    y = norm_y(kind, fused, x, r, w, b)
    s = x + r if fused else x
    assert_close(y, torch_norm(kind, s, [n], w, b, 1e-5), dtype, y_scale(s, [n], w, b, "layer" in kind), kind)
    assert torch.equal(norm_y(kind, fused, x, r, w, b), y), "a second call differs"
    for row in (0, 3):
        alone = norm_y(kind, fused, x[row:row + 1], r[row:row + 1] if fused else None, w, b)
        assert torch.equal(alone, y[row:row + 1]), f"row {row} alone differs"


def test_split_rows_cuda_graph_replays():
    # under capture the workspace comes from the graph's pool with a memset node; replays repeat
    x = torch.randn(10, 2**20, device=DEV, dtype=torch.bfloat16)
    w, b = make_params([2**20], torch.float32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        reducekit.layer_norm(x, [2**20], w, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = reducekit.layer_norm(x, [2**20], w, b)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        assert torch.equal(y, reducekit.layer_norm(x, [2**20], w, b)), "graph replay differs from an eager call"


# ----------------------------------------------------------------------------- backward

def grads(fn, inputs, dy):
    leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(dy)
    return [t.grad if t is not None else None for t in leaves]


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [1, 3, 33, 781, 4099, 12800, 65537, 2**18])
def test_backward(kind, dtype, n):
    check_backward(kind, dtype, n, 300 if n <= 4099 else max(3, 2**20 // n))


# More rows than the fused backward's resident CTAs: each loops over rows, its dweight/dbias
# partials accumulating in registers.
@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("n,rows", [(1024, 3000), (4096, 2000), (8192, 1200), (12800, 700)])
def test_backward_many_rows(kind, dtype, n, rows):
    check_backward(kind, dtype, n, rows)


def check_backward(kind, dtype, n, rows):
    for pdt in param_dtypes(dtype):
        x = torch.randn(rows, n, device=DEV).to(dtype)
        x[::5] = 0.75  # constant rows
        dy = torch.randn_like(x)
        w, b = make_params([n], pdt, bias=kind == "layer_norm")
        if kind == "layer_norm":
            got = grads(lambda x, w, b: reducekit.layer_norm(x, [n], w, b), [x, w, b], dy)
            ref = grads(lambda x, w, b: torch_norm(kind, x, [n], w, b, 1e-5), [x.double(), w.double(), b.double()],
                        dy.double())
        else:
            got = grads(lambda x, w: reducekit.rms_norm(x, [n], w, 1e-5), [x, w], dy)
            ref = grads(lambda x, w: torch_norm(kind, x, [n], w, None, 1e-5), [x.double(), w.double()], dy.double())
        xd = x.double()
        rstd = 1 / ((xd - (xd.mean(-1, keepdim=True) if kind == "layer_norm" else 0)).pow(2).mean(-1, keepdim=True)
                    + 1e-5).sqrt()
        g = dy.double().abs() * w.double().abs()
        dx_scale = rstd * (g.amax(-1, keepdim=True) + (xd.abs() * rstd).amax(-1, keepdim=True) * (1 + g.mean(-1, True)))
        assert_close(got[0], ref[0], dtype, dx_scale, "dx")
        col_scale = (dy.double().abs() * (xd.abs() * rstd)).sum(0)
        assert_close(got[1], ref[1], pdt, col_scale, "dweight")
        if kind == "layer_norm":
            assert_close(got[2], ref[2], pdt, dy.double().abs().sum(0), "dbias")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_param_grads_bitwise_deterministic(kind):
    x = torch.randn(8192, 1024, device=DEV, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w, b = make_params([1024], torch.float32, bias=kind == "layer_norm")
    if kind == "layer_norm":
        fn, inputs = (lambda x, w, b: reducekit.layer_norm(x, [1024], w, b)), [x, w, b]
    else:
        fn, inputs = (lambda x, w: reducekit.rms_norm(x, [1024], w)), [x, w]
    first = grads(fn, inputs, dy)
    for _ in range(3):
        again = grads(fn, inputs, dy)
        for a, b_ in zip(first, again):
            assert torch.equal(a, b_), "gradients differ between runs"


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_fused_residual_backward(kind):
    n = 1000
    x = torch.randn(17, n, device=DEV, dtype=torch.float64)
    r = torch.randn_like(x)
    dy, ds = torch.randn_like(x), torch.randn_like(x)
    w, b = make_params([n], torch.float64, bias=kind == "layer_norm")

    def run(fused, x, r, w, b):
        if fused:
            y, s = (reducekit.add_layer_norm(x, r, [n], w, b) if kind == "layer_norm"
                    else reducekit.add_rms_norm(x, r, [n], w, 1e-5))
        else:
            s = x + r
            y = torch_norm(kind, s, [n], w, b, 1e-5)
        return y, s

    leaves = [[t.clone().requires_grad_(True) if t is not None else None for t in (x, r, w, b)] for _ in range(2)]
    for fused, ls in zip((True, False), leaves):
        y, s = run(fused, *ls)
        torch.autograd.backward([y, s], [dy, ds])
    for got, ref, name in zip(leaves[0], leaves[1], ("x", "residual", "weight", "bias")):
        if got is not None:
            torch.testing.assert_close(got.grad, ref.grad, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("kind,biased", [("layer_norm", True), ("rms_norm", False), ("rms_norm", True)],
                         ids=["layer_norm", "rms_norm", "rms_norm_bias"])
def test_grads_of_any_subset_of_inputs(kind, biased, fused):
    """Only some inputs need grad (a frozen weight, a detached x, no bias): each gets its grad,
    the others none, whatever sits before it in the argument list."""
    n = 24
    x, r = (torch.randn(5, n, device=DEV, dtype=torch.float64) for _ in range(2))
    w, b = make_params([n], torch.float64, bias=biased)
    names = ["x", "residual", "weight", "bias"] if fused else ["x", "weight", "bias"]
    given = {"x": x, "residual": r, "weight": w, "bias": b}
    for mask in range(1, 2 ** len(names)):
        wanted = {name for i, name in enumerate(names) if mask >> i & 1 and given[name] is not None}
        if not wanted:
            continue
        grads = []
        for ours in (True, False):
            t = {k: (v.clone().requires_grad_(k in wanted) if v is not None else None) for k, v in given.items()}
            s = t["x"] + t["residual"] if fused else t["x"]
            if not ours:
                y = torch_norm(kind, s, [n], t["weight"], t["bias"], 1e-5)
            elif kind == "layer_norm":
                y = (reducekit.add_layer_norm(t["x"], t["residual"], [n], t["weight"], t["bias"])[0] if fused
                     else reducekit.layer_norm(t["x"], [n], t["weight"], t["bias"]))
            else:
                y = (reducekit.add_rms_norm(t["x"], t["residual"], [n], t["weight"], 1e-5, t["bias"])[0] if fused
                     else reducekit.rms_norm(t["x"], [n], t["weight"], 1e-5, t["bias"]))
            (y * torch.arange(y.numel(), device=DEV, dtype=y.dtype).view_as(y).sin()).sum().backward()
            grads.append({k: v.grad for k, v in t.items() if v is not None and k in names})
        for name in names:
            got, ref = grads[0].get(name), grads[1].get(name)
            if name in wanted:
                torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9, msg=f"{name} of {sorted(wanted)}")
            else:
                assert got is None, f"{name} got a grad though only {sorted(wanted)} need one"


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_gradcheck(kind):
    x = torch.randn(3, 4, 5, device=DEV, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, device=DEV, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 5, device=DEV, dtype=torch.float64, requires_grad=True)
    r = torch.randn(3, 4, 5, device=DEV, dtype=torch.float64, requires_grad=True)
    if kind == "layer_norm":
        assert torch.autograd.gradcheck(lambda x, w, b: reducekit.layer_norm(x, [4, 5], w, b), (x, w, b))
        assert torch.autograd.gradcheck(lambda x, r, w, b: reducekit.add_layer_norm(x, r, [4, 5], w, b), (x, r, w, b))
    else:
        assert torch.autograd.gradcheck(lambda x, w: reducekit.rms_norm(x, [4, 5], w, 1e-5), (x, w))
        assert torch.autograd.gradcheck(lambda x, r, w: reducekit.add_rms_norm(x, r, [4, 5], w, 1e-5), (x, r, w))
        # the optional bias, with and without a weight
        assert torch.autograd.gradcheck(lambda x, w, b: reducekit.rms_norm(x, [4, 5], w, 1e-5, b), (x, w, b))
        assert torch.autograd.gradcheck(lambda x, b: reducekit.rms_norm(x, [4, 5], None, 1e-5, bias=b), (x, b))
        assert torch.autograd.gradcheck(lambda x, r, w, b: reducekit.add_rms_norm(x, r, [4, 5], w, 1e-5, b),
                                        (x, r, w, b))


# ----------------------------------------------------------------------------- torch integration

def test_opcheck():
    x = torch.randn(6, 40, device=DEV, requires_grad=True)
    r = torch.randn(6, 40, device=DEV, requires_grad=True)
    w = torch.randn(40, device=DEV, requires_grad=True)
    b = torch.randn(40, device=DEV, requires_grad=True)
    ops = torch.ops.reducekit
    torch.library.opcheck(ops.layer_norm, (x, [40], w, b, 1e-5))
    torch.library.opcheck(ops.layer_norm, (x, [40], None, None, 1e-5))
    torch.library.opcheck(ops.rms_norm, (x, [40], w, 1e-6))
    torch.library.opcheck(ops.rms_norm, (x, [40], w, 1e-6, b))
    torch.library.opcheck(ops.rms_norm, (x, [40], None, 1e-6, b))
    torch.library.opcheck(ops.add_layer_norm, (x, r, [40], w, b, 1e-5))
    torch.library.opcheck(ops.add_rms_norm, (x, r, [40], w, 1e-6))
    torch.library.opcheck(ops.add_rms_norm, (x, r, [40], w, 1e-6, b))
    _, mean, rstd = ops.layer_norm(x.detach(), [40], w.detach(), b.detach(), 1e-5)
    dy = torch.randn(6, 40, device=DEV)
    torch.library.opcheck(ops.layer_norm_backward, (dy, x.detach(), [40], mean, rstd, w.detach(), True, torch.float32))
    torch.library.opcheck(ops.rms_norm_backward, (dy, x.detach(), [40], rstd, w.detach(), False, torch.float32))
    torch.library.opcheck(ops.rms_norm_backward, (dy, x.detach(), [40], rstd, w.detach(), True, torch.float32, True))
    torch.library.opcheck(ops.rms_norm_backward, (dy, x.detach(), [40], rstd, None, False, torch.float32, True))


def test_compile_fullgraph_and_cuda_graph():
    ln = reducekit.nn.LayerNorm(256).to(DEV)
    rms = reducekit.nn.RMSNorm(256).to(DEV)

    def f(x, r):
        y, s = reducekit.add_rms_norm(x, r, [256], rms.weight)
        return ln(y) + rms(s)

    x = torch.randn(64, 256, device=DEV)
    r = torch.randn_like(x)
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x, r), f(x, r))
    # forward and backward under torch.compile
    xg = x.clone().requires_grad_(True)
    compiled(xg, r).sum().backward()
    xe = x.clone().requires_grad_(True)
    f(xe, r).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad)

    static_x = x.clone()
    with torch.no_grad():
        f(static_x, r)  # warm-up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = f(static_x, r)
        static_x.copy_(x * 2)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, f(x * 2, r))


@pytest.mark.parametrize("cls,ref_cls", [("LayerNorm", torch.nn.LayerNorm), ("RMSNorm", torch.nn.RMSNorm)])
def test_nn_modules_load_torch_state_dicts(cls, ref_cls):
    ref = ref_cls([4, 32]).to(DEV)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p))
    mod = getattr(reducekit.nn, cls)([4, 32]).to(DEV)
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(8, 4, 32, device=DEV)
    torch.testing.assert_close(mod(x), ref(x), rtol=1e-5, atol=1e-5)
    if cls == "LayerNorm":
        plain = reducekit.nn.LayerNorm(32, elementwise_affine=False).to(DEV)
        torch.testing.assert_close(plain(x), torch.nn.functional.layer_norm(x, [32]), rtol=1e-5, atol=1e-5)
    # mixed precision: bfloat16 activations, float32 parameters
    xb = x.to(torch.bfloat16)
    want = torch_norm(cls == "LayerNorm" and "layer_norm" or "rms_norm", xb, [4, 32], mod.weight,
                      getattr(mod, "bias", None), mod.eps if mod.eps is not None else torch.finfo(torch.bfloat16).eps)
    assert mod(xb).dtype == torch.bfloat16
    torch.testing.assert_close(mod(xb).double(), want, rtol=2e-2, atol=2e-2)


def test_errors():
    x = torch.randn(4, 8, device=DEV)
    with pytest.raises(RuntimeError, match="normalized_shape:"):
        reducekit.layer_norm(x, [9])
    with pytest.raises(RuntimeError, match="normalized_shape:"):
        reducekit.rms_norm(x, [2, 4, 8])
    with pytest.raises(RuntimeError, match="weight:"):
        reducekit.layer_norm(x, [8], torch.ones(7, device=DEV))
    with pytest.raises(RuntimeError, match="weight:"):
        reducekit.rms_norm(x, [8], torch.ones(8, device=DEV, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="bias:"):
        reducekit.layer_norm(x, [8], None, torch.ones(4, 2, device=DEV))
    with pytest.raises(RuntimeError, match="residual:"):
        reducekit.add_layer_norm(x, torch.randn(4, 7, device=DEV), [8])
    with pytest.raises(RuntimeError, match="input:"):
        reducekit.layer_norm(x.cpu(), [8])
    with pytest.raises(RuntimeError, match="out_dtype:"):
        reducekit.rms_norm(x, [8], out_dtype=torch.int32)
    with pytest.raises(RuntimeError, match="weight:"):
        reducekit.layer_norm(x.bfloat16(), [8], torch.ones(8, device=DEV, dtype=torch.float16), out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="residual:"):
        reducekit.add_rms_norm(x.bfloat16(), torch.randn(4, 7, device=DEV), [8], residual_in_float32=True)
    with pytest.raises(RuntimeError, match="residual:"):
        reducekit.add_layer_norm(x.bfloat16(), x.long(), [8], residual_in_float32=True)


# ----------------------------------------------------------------------------- rms_norm's bias
# Not in torch: the oracle is the composition F.rms_norm(x, shape, w) + b in float64 (torch_norm).

@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [1, 33, 781, 4099, 24576, 24577, 40009, 2**18, 2**20])
def test_rms_norm_bias_forward(dtype, n, fused):
    rows = 3 if n >= 2**18 else 37
    for pdt in param_dtypes(dtype):
        for with_weight in (True, False):
            x = torch.randn(rows, n, device=DEV).to(dtype)
            r = torch.randn_like(x)
            w, b = make_params([n], pdt, weight=with_weight)
            if fused:
                y, s = reducekit.add_rms_norm(x, r, [n], w, 1e-5, b)
                torch.testing.assert_close(s, x + r, rtol=0, atol=0)
            else:
                s, y = x, reducekit.rms_norm(x, [n], w, 1e-5, bias=b)
            assert_close(y, torch_norm("rms_norm", s, [n], w, b, 1e-5), dtype, y_scale(s, [n], w, b, False),
                         f"rms_norm + bias params {pdt} weight {with_weight}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_rms_norm_bias_against_torch_composition(dtype):
    """Against F.rms_norm(x, ..., w) + b run by torch in the same dtype: that rounds twice (after
    the scale and after the add) where reducekit rounds once, so within an ulp or two of y."""
    x = torch.randn(64, 4096, device=DEV, dtype=dtype)
    w, b = make_params([4096], dtype)
    want = torch.nn.functional.rms_norm(x, [4096], w, 1e-6) + b
    got = reducekit.rms_norm(x, [4096], w, 1e-6, b)
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * 4)


def test_rms_norm_without_bias_keeps_its_bits():
    """bias=None is today's rms_norm: the old positional call, bias=None and a zero bias give the
    same values, and x = -0 still gives -0 (as torch's x * rstd * w; a zero bias gives +0)."""
    n = 4096
    x = torch.randn(16, n, device=DEV, dtype=torch.bfloat16)
    x[:, :7] = -0.0
    w = torch.rand(n, device=DEV, dtype=torch.bfloat16) + 0.5
    old = torch.ops.reducekit.rms_norm(x, [n], w, 1e-6)[0]
    assert torch.equal(old, reducekit.rms_norm(x, [n], w, 1e-6, None))
    assert torch.equal(old, reducekit.rms_norm(x, [n], w, 1e-6, torch.zeros_like(w)))
    assert bool(torch.signbit(old[:, :7]).all()), "rms_norm without a bias turned -0 into +0"
    y, s = reducekit.add_rms_norm(x, torch.zeros_like(x), [n], w, 1e-6)
    assert torch.equal(y, torch.ops.reducekit.add_rms_norm(x, torch.zeros_like(x), [n], w, 1e-6)[0])


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=dtype_id)
@pytest.mark.parametrize("n,rows", [(1, 300), (33, 300), (1024, 3000), (4099, 300), (12800, 700), (65537, 9)])
def test_rms_norm_bias_backward(dtype, n, rows, fused):
    """dx, dweight and dbias (the column sums of dy) against the float64 composition, on the fused
    backward's paths (row lanes, one-row CTAs looping over rows) and the two-kernel path."""
    for pdt in param_dtypes(dtype):
        x = torch.randn(rows, n, device=DEV).to(dtype)
        r = torch.randn_like(x)
        dy = torch.randn_like(x)
        w, b = make_params([n], pdt)
        # The fused form normalizes s = x + r rounded to x's dtype: the oracle takes that s, and
        # d(residual) = dx.
        s = x + r if fused else x
        if fused:
            got = grads(lambda x, r, w, b: reducekit.add_rms_norm(x, r, [n], w, 1e-5, b), [x, r, w, b], dy)
            assert torch.equal(got[0], got[1]), "d(residual) differs from dx"
            got = [got[0], got[2], got[3]]
        else:
            got = grads(lambda x, w, b: reducekit.rms_norm(x, [n], w, 1e-5, b), [x, w, b], dy)
        ref = grads(lambda s, w, b: torch_norm("rms_norm", s, [n], w, b, 1e-5), [s.double(), w.double(), b.double()],
                    dy.double())
        s = s.double()
        rstd = 1 / (s.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
        g = dy.double().abs() * w.double().abs()
        dx_scale = rstd * (g.amax(-1, keepdim=True) + (s.abs() * rstd).amax(-1, keepdim=True) * (1 + g.mean(-1, True)))
        assert_close(got[0], ref[0], dtype, dx_scale, "dx")
        assert_close(got[1], ref[1], pdt, (dy.double().abs() * (s.abs() * rstd)).sum(0), "dweight")
        assert_close(got[2], ref[2], pdt, dy.double().abs().sum(0), "dbias")


def test_rms_norm_bias_grads_bitwise_deterministic():
    x = torch.randn(8192, 1024, device=DEV, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w, b = make_params([1024], torch.float32)
    fn = lambda x, w, b: reducekit.rms_norm(x, [1024], w, None, b)  # noqa: E731
    first = grads(fn, [x, w, b], dy)
    for _ in range(3):
        for a, b_ in zip(first, grads(fn, [x, w, b], dy)):
            assert torch.equal(a, b_), "gradients differ between runs"


def test_rms_norm_bias_compile_fullgraph():
    rms = reducekit.nn.RMSNorm(256, bias=True).to(DEV)
    add = reducekit.nn.AddRMSNorm(256, bias=True).to(DEV)
    with torch.no_grad():
        rms.bias.copy_(torch.randn(256))
        add.bias.copy_(torch.randn(256))

    def f(x, r):
        y, s = add(x, r)
        return rms(y) + reducekit.rms_norm(s, [256], None, None, rms.bias)

    x = torch.randn(64, 256, device=DEV)
    r = torch.randn_like(x)
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x, r), f(x, r))
    got = grads(compiled, [x, r], torch.ones_like(x))
    params_compiled = [p.grad.clone() for p in (rms.bias, add.bias, add.weight)]
    for p in (rms.bias, add.bias, add.weight):
        p.grad = None
    want = grads(f, [x, r], torch.ones_like(x))
    for a, b_ in zip(got, want):
        torch.testing.assert_close(a, b_)
    for a, p in zip(params_compiled, (rms.bias, add.bias, add.weight)):
        torch.testing.assert_close(a, p.grad)


def test_nn_rms_norm_bias_state_dict():
    """RMSNorm(bias=True): a zero-initialized 'bias' in the state dict, which round-trips; without
    it the state dict is torch's, and torch's loads unchanged."""
    torch_mod = torch.nn.RMSNorm([4, 32]).to(DEV)
    plain = reducekit.nn.RMSNorm([4, 32]).to(DEV)
    assert set(plain.state_dict()) == set(torch_mod.state_dict()) == {"weight"}
    plain.load_state_dict(torch_mod.state_dict())

    mod = reducekit.nn.RMSNorm([4, 32], 1e-5, bias=True).to(DEV)
    assert set(mod.state_dict()) == {"weight", "bias"}
    assert torch.equal(mod.bias, torch.zeros(4, 32, device=DEV)), "the bias starts at zero"
    assert "bias=True" in repr(mod)
    with torch.no_grad():
        mod.weight.copy_(torch.randn(4, 32))
        mod.bias.copy_(torch.randn(4, 32))
    again = reducekit.nn.RMSNorm([4, 32], 1e-5, bias=True).to(DEV)
    again.load_state_dict(mod.state_dict())
    x = torch.randn(8, 4, 32, device=DEV)
    assert torch.equal(again(x), mod(x))
    torch.testing.assert_close(mod(x), torch.nn.functional.rms_norm(x, [4, 32], mod.weight, 1e-5) + mod.bias)
    # torch's state dict has no bias: a strict load into a biased module says so
    missing = again.load_state_dict(torch_mod.state_dict(), strict=False).missing_keys
    assert missing == ["bias"]
    # no bias without elementwise_affine, as torch.nn.LayerNorm
    assert reducekit.nn.RMSNorm(32, elementwise_affine=False, bias=True).bias is None
    # the fused module takes it the same way
    add = reducekit.nn.AddRMSNorm(32, bias=True).to(DEV)
    assert set(add.state_dict()) == {"weight", "bias"}


def test_patched_torch_rms_norm_has_no_bias():
    """reducekit.patch changes a torch.nn.RMSNorm's class only: the module has no bias attribute,
    and runs as before."""
    model = torch.nn.Sequential(torch.nn.RMSNorm(32)).to(DEV)
    x = torch.randn(4, 32, device=DEV)
    want = model(x)
    reducekit.patch(model, ops={"rms_norm"})
    assert isinstance(model[0], reducekit.nn.RMSNorm) and "bias" not in vars(model[0])["_parameters"]
    torch.testing.assert_close(model(x), want)


# ----------------------------------------------------------------------------- out_dtype, residual_in_float32
# y in a dtype other than the input's is the float32 (float64) result rounded once to it: within
# that dtype's own tolerance of the float64 oracle (a y rounded to a 16-bit input's dtype first
# would be 2^13 times too coarse for float32's). The float32 residual stream: s = input + residual
# in float32, never rounded to input's dtype, and y its norm.

def norm_fn(kind, x, shape, w, b, eps=1e-5, **options):
    if kind == "layer_norm":
        return reducekit.layer_norm(x, shape, w, b, eps, **options)
    return reducekit.rms_norm(x, shape, w, eps, b, **options)


def add_norm_fn(kind, x, r, shape, w, b, eps=1e-5, **options):
    fn = reducekit.add_layer_norm if kind == "layer_norm" else reducekit.add_rms_norm
    return fn(x, r, shape, weight=w, bias=b, eps=eps, **options)


OUT_DTYPES = [(torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.bfloat16),
              (torch.bfloat16, torch.float16), (torch.float32, torch.float64), (torch.float64, torch.float32)]


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype,out_dtype", OUT_DTYPES, ids=lambda d: dtype_id(d))
@pytest.mark.parametrize("n", [33, 4099, 24577])
def test_out_dtype(kind, dtype, out_dtype, n):
    x = torch.randn(rows_for(n), n, device=DEV).to(dtype)
    for pdt in param_dtypes(dtype):
        w, b = make_params([n], pdt)
        y = norm_fn(kind, x, [n], w, b, out_dtype=out_dtype)
        assert_close(y, torch_norm(kind, x, [n], w, b, 1e-5), out_dtype, y_scale(x, [n], w, b, kind == "layer_norm"),
                     f"y ({dtype_id(pdt)} parameters)")
        assert torch.equal(norm_fn(kind, x, [n], w, b, out_dtype=dtype), norm_fn(kind, x, [n], w, b)), \
            "out_dtype = input's dtype: the plain call"


def torch_dtype_or_error(fn, *args):
    """The dtype of torch's own fn(*args), or, where torch refuses the call, its error."""
    try:
        return fn(*args).dtype
    except RuntimeError as exc:
        return f"none, it raised {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
def test_mixed_precision_output_dtype_against_torch(kind, dtype):
    """16-bit x with float32 weight (and bias, layer_norm's): y's dtype against the dtype torch's
    own op gives for the same call on the GPU. reducekit's rule (docs/python.md, "Dtypes"): y has
    x's dtype.
    rms_norm: torch's F.rms_norm (2.11), given a weight of another dtype than x's, warns and takes
    its composite path on every device (ATen's rms_norm_symint), which normalizes in float32,
    multiplies by the weight and casts y back with .type_as(input): the same rule, so y's dtype
    must equal torch's.
    layer_norm: torch's CUDA kernel (2.11) reads weight and bias in x's dtype only and raises
    "expected scalar type BFloat16 but found Float", where its CPU kernel and its fake function
    (torch._refs.native_layer_norm) give x's dtype. With no CUDA dtype of torch's to equal, y must
    have reducekit's documented dtype; torch's outcome on the GPU and on the CPU is in the message."""
    n = 1000
    x = torch.randn(rows_for(n), n, device=DEV).to(dtype)
    w, b = make_params([n], torch.float32, bias=kind == "layer_norm")
    if kind == "rms_norm":
        y = reducekit.rms_norm(x, [n], w)
        theirs = torch_dtype_or_error(torch.nn.functional.rms_norm, x, [n], w)
        assert y.dtype == theirs, f"rms_norm({dtype_id(dtype)} x, float32 weight): reducekit {y.dtype}, torch {theirs}"
    else:
        y = reducekit.layer_norm(x, [n], w, b)
        theirs = torch_dtype_or_error(torch.nn.functional.layer_norm, x, [n], w, b)
        on_cpu = torch_dtype_or_error(torch.nn.functional.layer_norm, x.cpu(), [n], w.cpu(), b.cpu())
        assert y.dtype == dtype, (f"layer_norm({dtype_id(dtype)} x, float32 weight and bias): reducekit {y.dtype}, "
                                  f"documented: x's ({dtype}); torch on the GPU: {theirs}; torch on the CPU: {on_cpu}")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
@pytest.mark.parametrize("residual_dtype", [torch.float32, "input's"], ids=["float32_residual", "input_dtype_residual"])
@pytest.mark.parametrize("n", [33, 4099, 24577])
def test_residual_in_float32(kind, dtype, residual_dtype, n):
    x = torch.randn(rows_for(n), n, device=DEV).to(dtype)
    r = torch.randn(x.shape, device=DEV).to(dtype if residual_dtype == "input's" else residual_dtype)
    w, b = make_params([n], torch.float32)
    y, s = add_norm_fn(kind, x, r, [n], w, b, residual_in_float32=True)
    assert s.dtype == torch.float32 and torch.equal(s, x.float() + r.float()), "s: the float32 sum, unrounded"
    scale = y_scale(s, [n], w, b, kind == "layer_norm")
    assert_close(y, torch_norm(kind, s, [n], w, b, 1e-5), dtype, scale, "y")
    y32, s32 = add_norm_fn(kind, x, r, [n], w, b, residual_in_float32=True, out_dtype=torch.float32)
    assert torch.equal(s32, s)
    assert_close(y32, torch_norm(kind, s, [n], w, b, 1e-5), torch.float32, scale, "y in float32")


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_residual_in_float32_backward(kind):
    """Gradients through the float32 stream against torch's unfused composition: float32 input
    and a float64 residual (the stream then float64, the output rounded to float32), so both
    sides compute in float64 and agree closely; bfloat16 input with a float32 residual at
    bfloat16's tolerance."""
    n = 1000
    for dtype, stream in ((torch.float32, torch.float64), (torch.bfloat16, torch.float32)):
        x = torch.randn(17, n, device=DEV).to(dtype)
        r = torch.randn(17, n, device=DEV, dtype=stream)
        w, b = make_params([n], torch.float32)
        dy, ds = torch.randn(17, n, device=DEV).to(dtype), torch.randn(17, n, device=DEV, dtype=stream)

        def fused(x, r, w, b):
            return add_norm_fn(kind, x, r, [n], w, b, residual_in_float32=True)

        def unfused(x, r, w, b):
            s = x.to(stream) + r
            wide = [None if t is None else t.to(stream) for t in (w, b)]
            return torch_norm(kind, s, [n], *wide, 1e-5).to(dtype), s

        leaves = [[t.clone().requires_grad_(True) for t in (x, r, w, b)] for _ in range(2)]
        for fn, ls in zip((fused, unfused), leaves):
            y, s = fn(*ls)
            torch.autograd.backward([y, s], [dy, ds])
        tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
        for got, ref, name in zip(leaves[0], leaves[1], ("x", "residual", "weight", "bias")):
            torch.testing.assert_close(got.grad, ref.grad, **tol, msg=f"{name} ({dtype_id(dtype)})")


def test_norm_options_modules_and_compile():
    """AddRMSNorm / AddLayerNorm(residual_in_float32=True) keep a float32 stream from the first
    block on (residual=None: s = input in float32); out_dtype on every norm module; torch's state
    dicts; torch.compile(fullgraph=True) gives the eager results."""
    n = 256
    x = torch.randn(64, n, device=DEV, dtype=torch.bfloat16)
    add = reducekit.nn.AddRMSNorm(n, 1e-6, residual_in_float32=True).to(DEV)
    add_ln = reducekit.nn.AddLayerNorm(n, residual_in_float32=True, out_dtype=torch.float32).to(DEV)
    rms = reducekit.nn.RMSNorm(n, out_dtype=torch.float32).to(DEV)
    assert set(add.state_dict()) == set(torch.nn.RMSNorm(n).state_dict())
    assert set(add_ln.state_dict()) == set(torch.nn.LayerNorm(n).state_dict())
    y0, s0 = add(x)
    assert s0.dtype == torch.float32 and torch.equal(s0, x.float()) and y0.dtype == torch.bfloat16
    y1, s1 = add(x, s0)
    assert s1.dtype == torch.float32 and torch.equal(s1, x.float() + s0)
    y2, s2 = add_ln(y1, s1)
    assert y2.dtype == torch.float32 and torch.equal(s2, y1.float() + s1)
    assert rms(x).dtype == torch.float32 and reducekit.nn.LayerNorm(n, out_dtype=torch.float16).to(DEV)(x).dtype == torch.float16

    # One call each from the graph's inputs: a 16-bit y fed on into further arithmetic inside a
    # compiled graph may skip its rounding (inductor's emulate_precision_casts), which would make
    # the comparison about inductor rather than these modules.
    def f(x, s):
        return (*add(x), *add(x, s), *add_ln(x, s), rms(x))

    for got, want in zip(torch.compile(f, fullgraph=True)(x, s1), f(x, s1)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
