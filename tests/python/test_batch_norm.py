# SPDX-License-Identifier: Apache-2.0
"""reducekit batch_norm (functional, torch.ops.reducekit.batch_norm / batch_norm_backward, the
BatchNorm1d/2d/3d modules) against torch in float64.

The oracle is torch.nn.functional.batch_norm on the same values cast to float64 (weight, bias and
running statistics too); gradients likewise through torch.autograd in float64. Outputs are compared
in their own dtype. Tolerance, as tests/python/test_norm.py: 4 ulp of the output's dtype at |ref|
plus an absolute term, 1e-5 (float32 math; 1e-12 for float64) times the magnitude of the terms
behind the value: (|x| + |mean|) * invstd * |w| + |b| for y (what x - mean and the folded
scale/shift round at), per-channel sums of magnitudes for dweight/dbias and the running
statistics. Layouts: contiguous (NCHW, NCDHW) and channels_last / channels_last_3d ("nhwc");
"+offset" puts the data one element past a 16-byte boundary. conftest.py skips this module, with
the reason, where torch, a GPU or a built reducekit is missing.
"""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

import reducekit
from tolerance import assert_close

DEV = "cuda"
EPS = 1e-5
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HALF = (torch.float16, torch.bfloat16)


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def case_id(case):
    shape, layout = case
    return "x".join(str(s) for s in shape) + "-" + layout


def param_dtype(dtype):
    """weight, bias and running statistics: float32 for 16-bit x (as torch's modules keep them)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def channels_last_format(rank):
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(rank)


def reduce_dims(x):
    return [0] + list(range(2, x.dim()))


def per_channel(v, x):
    """A [C] tensor shaped to broadcast against x."""
    return v.view([1, -1] + [1] * (x.dim() - 2))


def assert_same_format(y, x, what="y"):
    """y is laid out as x: contiguous stays contiguous, channels_last(_3d) stays channels-last."""
    fmt = channels_last_format(x.dim())
    assert y.is_contiguous() == x.is_contiguous(), \
        f"{what}: strides {y.stride()} for x's {x.stride()} (contiguous differs)"
    if fmt is not None:
        assert y.is_contiguous(memory_format=fmt) == x.is_contiguous(memory_format=fmt), \
            f"{what}: strides {y.stride()} for x's {x.stride()} ({fmt} differs)"


# ----------------------------------------------------------------------------- inputs

def make_x(shape, dtype, layout="nchw", seed=0):
    """randn with a per-channel shift and scale, in `layout` ("nchw", "nhwc", either + "+offset")."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    c = shape[1]
    shift = 2 * torch.randn(c, device=DEV, generator=g, dtype=torch.float64)
    scale = 0.5 + 1.5 * torch.rand(c, device=DEV, generator=g, dtype=torch.float64)
    base = torch.randn(shape, device=DEV, generator=g, dtype=torch.float64)
    x = (base * scale.view([1, -1] + [1] * (len(shape) - 2)) + shift.view([1, -1] + [1] * (len(shape) - 2)))
    x = x.to(dtype)
    if layout.startswith("nhwc"):
        x = x.contiguous(memory_format=channels_last_format(len(shape)))
    if layout.endswith("+offset"):
        # the same layout one element past the allocation's (16-byte aligned) start
        buf = torch.empty(x.numel() + 1, device=DEV, dtype=dtype)
        moved = torch.as_strided(buf, x.shape, x.stride(), 1)
        moved.copy_(x)
        x = moved
    return x


def make_params(c, pdt, weight=True, bias=True, seed=1):
    g = torch.Generator(device=DEV).manual_seed(seed)
    w = (1 + 0.5 * torch.randn(c, device=DEV, generator=g)).to(pdt) if weight else None
    b = (0.5 * torch.randn(c, device=DEV, generator=g)).to(pdt) if bias else None
    return w, b


def make_running(c, pdt, seed=2):
    g = torch.Generator(device=DEV).manual_seed(seed)
    rm = (0.5 * torch.randn(c, device=DEV, generator=g)).to(pdt)
    rv = (0.5 + torch.rand(c, device=DEV, generator=g)).to(pdt)
    return rm, rv


def d64(t):
    """A float64 copy (never t itself, also when t is float64: torch's reference updates it in place)."""
    return None if t is None else t.detach().to(torch.float64, copy=True)


def torch_bn(x, rm, rv, w, b, training, momentum=0.1, eps=EPS):
    """torch's batch_norm in float64: (y, running_mean, running_var) after the call (copies)."""
    rm64, rv64 = d64(rm), d64(rv)
    y = F.batch_norm(x.double(), rm64, rv64, d64(w), d64(b), training, momentum, eps)
    return y, rm64, rv64


def stats64(x, rm, rv, training, eps=EPS):
    """The per-channel mean and invstd the forward normalizes with, in float64."""
    if training:
        xd = x.double()
        var, mean = torch.var_mean(xd, reduce_dims(x), unbiased=False)
    else:
        mean, var = rm.double(), rv.double()
    return mean, 1 / (var + eps).sqrt()


def y_scale(x, mean, invstd, w, b):
    """(|x| + |mean| + mean |x|) * invstd * |w| + |b| per element: x - mean carries the float32
    mean's rounding, which follows the channel's mean |x| (an element near a mean near 0 too)."""
    xd = x.double()
    dims = [d for d in range(x.dim()) if d != 1]
    mean_abs = xd.abs().mean(dims) if xd.numel() > 0 else torch.zeros_like(mean.double())
    s = (xd.abs() + per_channel(mean.abs(), x) + per_channel(mean_abs, x)) * per_channel(invstd, x)
    if w is not None:
        s = s * per_channel(w.double().abs(), x)
    if b is not None:
        s = s + per_channel(b.double().abs(), x)
    return s


def assert_running_close(got, ref, pdt, batch_scale, what):
    """Running statistics: (1 - m) * old + m * batch, float32 arithmetic (float64 for float64)."""
    assert got.dtype == pdt, f"{what}: dtype {got.dtype}, expected {pdt}"
    assert_close(got, ref, pdt, ref.abs() + batch_scale, what)


def compare_forward(x, training, w, b, rm, rv, momentum=0.1, check_format=True):
    """reducekit.batch_norm(x, ...) against torch's in float64: y (in x's dtype and, with
    check_format, its layout), the running statistics updated in training, untouched in eval."""
    dtype, pdt = x.dtype, param_dtype(x.dtype)
    running = rm is not None
    rm0, rv0 = (rm.clone(), rv.clone()) if running else (None, None)
    y_ref, rm_ref, rv_ref = torch_bn(x, rm, rv, w, b, training, momentum)
    y = reducekit.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=EPS)
    assert y.dtype == dtype and y.shape == x.shape
    if check_format:
        assert_same_format(y, x)
    mean, invstd = stats64(x, rm0, rv0, training)
    assert_close(y, y_ref, dtype, y_scale(x, mean, invstd, w, b), f"y ({'train' if training else 'eval'})")
    if running and training:
        xd = x.double()
        dims = reduce_dims(x)
        assert_running_close(rm, rm_ref, pdt, momentum * xd.abs().amax(dims), "running_mean")
        assert_running_close(rv, rv_ref, pdt, momentum * 4 * (xd - per_channel(mean, x)).pow(2).mean(dims),
                             "running_var")
    elif running:
        assert torch.equal(rm, rm0) and torch.equal(rv, rv0), "eval must leave the running statistics alone"
    return y


def check_forward(shape, dtype, layout, training, weight=True, bias=True, running=True, momentum=0.1, seed=0):
    pdt = param_dtype(dtype)
    x = make_x(shape, dtype, layout, seed=seed)
    w, b = make_params(shape[1], pdt, weight, bias)
    rm, rv = make_running(shape[1], pdt) if running else (None, None)
    return compare_forward(x, training, w, b, rm, rv, momentum)


# ----------------------------------------------------------------------------- forward

FORWARD_CASES = [
    ((37, 5), "nchw"),               # rank 2
    ((64, 300), "nchw"),             # rank 2, many channels
    ((4097, 3), "nchw"),             # rank 2, many rows
    ((8, 3, 100), "nchw"),           # rank 3
    ((5, 16, 1), "nchw"),            # rank 3, length 1
    ((4, 6, 7, 7), "nchw"),          # odd spatial
    ((4, 6, 7, 7), "nhwc"),
    ((4, 6, 7, 7), "nchw+offset"),   # misaligned base: scalar loads
    ((4, 8, 7, 7), "nhwc+offset"),
    ((2, 1, 33, 35), "nchw"),        # one channel
    ((16, 37, 1, 1), "nchw"),        # spatial 1
    ((16, 37, 1, 1), "nhwc"),
    ((3, 19, 5, 7, 9), "nchw"),      # rank 5, odd everything
    ((3, 19, 5, 7, 9), "nhwc"),
    ((2, 8, 4, 6, 8), "nchw"),
    ((2, 8, 4, 6, 8), "nhwc"),
    ((16, 4, 128, 128), "nchw"),     # a channel split over many chunks (CTAs)
    ((8, 64, 40, 40), "nhwc"),       # a channel tile split over many chunks
]


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", FORWARD_CASES, ids=case_id)
def test_forward(case, dtype, training):
    shape, layout = case
    check_forward(shape, dtype, layout, training)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_forward_affine_variants(affine, dtype, training, layout):
    """weight and/or bias None (1 and 0); training also without running statistics."""
    check_forward((6, 10, 9, 9), dtype, layout, training, weight=affine == "weight", bias=affine == "bias")
    if training:
        check_forward((6, 10, 9, 9), dtype, layout, True, weight=affine == "weight", bias=affine == "bias",
                      running=False)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
def test_params_in_input_dtype(dtype, training):
    """16-bit weight and bias are cast to float32: the same result as passing the float32 copies,
    and their gradients come back in their own dtype."""
    x = make_x((8, 12, 5, 5), dtype, "nhwc")
    w, b = make_params(12, dtype)
    rm, rv = make_running(12, torch.float32)
    rm2, rv2 = rm.clone(), rv.clone()
    y16 = reducekit.batch_norm(x, rm, rv, w, b, training=training)
    y32 = reducekit.batch_norm(x, rm2, rv2, w.float(), b.float(), training=training)
    assert torch.equal(y16, y32), "16-bit weight/bias differ from their float32 copies"
    assert torch.equal(rm, rm2) and torch.equal(rv, rv2)
    xl, wl, bl = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    reducekit.batch_norm(xl, rm.clone(), rv.clone(), wl, bl, training=training).backward(torch.randn_like(x))
    assert wl.grad.dtype == dtype and bl.grad.dtype == dtype and xl.grad.dtype == dtype
    assert torch.isfinite(wl.grad.float()).all() and torch.isfinite(xl.grad.float()).all()


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_other_strides(training):
    """Inputs neither contiguous nor channels_last give torch's values, as F.batch_norm takes any
    strides: a sliced tensor, a permuted one, and [N, L, C] transposed to [N, C, L] (C innermost)."""
    for x in (make_x((4, 6, 9, 20), torch.float32)[..., ::2],
              make_x((4, 6, 5, 7), torch.float32).permute(0, 1, 3, 2),
              make_x((5, 33, 7), torch.float32).transpose(1, 2)):
        w, b = make_params(x.shape[1], torch.float32)
        rm, rv = make_running(x.shape[1], torch.float32)
        compare_forward(x, training, w, b, rm, rv, check_format=False)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_constant_and_shifted_channels(dtype, layout):
    """A constant channel (variance 0: y = b exactly as torch, never NaN) and a channel of
    1000 + randn (the variance must not come from E[x^2] - E[x]^2)."""
    x = make_x((8, 4, 9, 9), torch.float64, "nchw")
    x[:, 1] = 3.25
    x[:, 2] = 1000 + torch.randn(8, 9, 9, device=DEV, dtype=torch.float64)
    x = x.to(dtype)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    pdt = param_dtype(dtype)
    w, b = make_params(4, pdt)
    rm, rv = make_running(4, pdt)
    rv0 = rv.clone()
    y_ref, rm_ref, rv_ref = torch_bn(x, rm, rv, w, b, True)
    y = reducekit.batch_norm(x, rm, rv, w, b, training=True)
    assert torch.isfinite(y.double()).all(), "NaN or inf in y"
    mean, invstd = stats64(x, None, None, True)
    assert_close(y, y_ref, dtype, y_scale(x, mean, invstd, w, b), "y")
    # The batch variance to 1e-3 of itself (E[x^2] - E[x]^2 in float32 is off by ~6% at a mean of 1000).
    var = x.double().var(reduce_dims(x), unbiased=True)
    assert_close(rv, rv_ref, pdt, rv_ref.abs() + 0.1 * var * 100, "running_var")
    # The constant channel: variance exactly 0, so running_var = (1 - 0.1) * its old value.
    assert float(rv[1]) == pytest.approx(0.9 * float(rv0[1]), rel=1e-6, abs=0.0), \
        "a constant channel's batch variance must be 0"


def test_running_var_of_values_near_1e4():
    """test_properties.py's shrunk case: float32 training on [3, 3] values near 1e4 (1e4 + randn
    as float32; the printed values are those floats exactly), no affine, momentum 0.1: running_var
    0.6629784 where torch's float64 gives 0.6630463. The batch variance of channel 0 came out
    1.4655844 against the exact 1.4662638 (fractions over the float32 values), 4.6e-4 off.

    Why it failed (reproduced bit for bit by a float32 emulation on the CPU): the statistics
    kernel folds each value as its own partial (one row a thread) and merged the partials with
    Chan's formula on the raw values, (x0 + x2) then x1. The merged mean of two values near 1e4 is
    rounded by up to 4.9e-4 (half a float32 unit there), and the next merge's delta (1.2) carries
    that into delta^2 n_a n_b / n: an error of about u |mean| / std of the variance, 5e-4 at
    |mean| / std = 8e3. reducekit.var subtracts an element of the set first
    (kernels/reduce_stats.cuh, kShift) and is exact on such data; with the channel's first value
    subtracted, the same merges give all three channels' variances to 6e-8. batch_norm's
    statistics now shift the same way (K_c, the channel's first element, in kernels/batch_norm.cuh
    and batch_norm_resident.cuh)."""
    x = torch.tensor([[9999.6895, 9999.9658, 10000.1758],
                      [9997.7197, 10000.5039, 10000.5596],
                      [9999.9248, 10000.9688, 9999.7646]], device=DEV)
    rm, rv = make_running(3, torch.float32)
    compare_forward(x, True, None, None, rm, rv, momentum=0.1)


@pytest.mark.large
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_large(dtype, layout):
    shape = (32, 64, 56, 56)
    check_forward(shape, dtype, layout, training=True)
    check_forward(shape, dtype, layout, training=False)
    check_backward(shape, dtype, layout, training=True)


def channel_view(x):
    """x as [N, C, S] over the same memory (S: every dim past C; channels-last in the strides)."""
    n, c = x.shape[:2]
    if x.is_contiguous():
        return x.view(n, c, -1)
    return x.permute(0, *range(2, x.dim()), 1).reshape(n, -1, c).transpose(1, 2)


def channel_fold64(fn, views, fold=torch.Tensor.sum, chunk=2**24):
    """fold (sum or amax) over dims 0 and 2 of fn(float64 chunks of the [N, C, S] views), per
    channel, chunk by chunk of S: no float64 copy of a whole tensor."""
    n, c, s = views[0].shape
    step = max(1, chunk // (n * c))
    parts = [fold(fn(*(v[:, :, s0:s0 + step].double() for v in views)), (0, 2)) for s0 in range(0, s, step)]
    return fold(torch.stack(parts), 0)


@pytest.mark.large
@pytest.mark.parametrize("case", [((2, 1, 2**30 + 5), "nchw"), ((2**15 + 1, 8, 64, 128), "nhwc")], ids=case_id)
def test_more_than_2_31_elements(case):
    """bfloat16 x of more than 2^31 elements (one channel of 2^31 + 10; channels-last, 2^28 a
    channel): the training forward (y, the running statistics) and backward (dx, dweight, dbias)
    against their float64 formulas. Per-channel sums come by chunks; y and dx are checked at each
    channel's first, middle and last elements (the last lie past element 2^31 in memory)."""
    shape, layout = case
    numel = math.prod(shape)
    need = 5 * numel * 2  # x, y, dy, dx and room, in bfloat16
    if torch.cuda.mem_get_info()[0] < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory")
    g = torch.Generator(device=DEV).manual_seed(41)
    order = [0, *range(2, len(shape)), 1] if layout == "nhwc" else list(range(len(shape)))
    back = [order.index(d) for d in range(len(shape))]

    def make():  # randn in the layout's memory order, seen in (N, C, ...) order
        return torch.randn([shape[d] for d in order], device=DEV, dtype=torch.bfloat16, generator=g).permute(back)

    x = make().mul_(2).add_(3)
    dy = make()
    c, count = shape[1], numel // shape[1]
    w, b = (t.requires_grad_(True) for t in make_params(c, torch.float32))
    rm, rv = make_running(c, torch.float32)
    rm0, rv0 = rm.clone(), rv.clone()
    xl = x.detach().requires_grad_(True)
    y = reducekit.batch_norm(xl, rm, rv, w, b, training=True, momentum=0.1, eps=EPS)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_same_format(y, x)
    y.backward(dy)
    xv, yv, dyv, dxv = (channel_view(t) for t in (x, y.detach(), dy, xl.grad))

    mean = channel_fold64(lambda t: t, [xv]) / count
    cm = mean.view(1, -1, 1)
    var = channel_fold64(lambda t: (t - cm).square(), [xv]) / count
    invstd = 1 / (var + EPS).sqrt()
    ci = invstd.view(1, -1, 1)
    amax = channel_fold64(lambda t: t.abs(), [xv], fold=torch.Tensor.amax)
    mean_abs = channel_fold64(lambda t: t.abs(), [xv]) / count
    assert_running_close(rm, 0.9 * rm0.double() + 0.1 * mean, torch.float32, 0.1 * amax, "running_mean")
    assert_running_close(rv, 0.9 * rv0.double() + 0.1 * var * count / (count - 1), torch.float32, 0.4 * var,
                         "running_var")

    def xs(t):  # |xhat| and what it rounds at
        return (t.abs() + cm.abs()) * ci

    sum_dy = channel_fold64(lambda d: d, [dyv])
    sum_dy_xhat = channel_fold64(lambda t, d: d * (t - cm) * ci, [xv, dyv])
    g_sum = channel_fold64(lambda d: d.abs(), [dyv])
    gxs_sum = channel_fold64(lambda t, d: d.abs() * xs(t), [xv, dyv])
    assert_close(b.grad, sum_dy, torch.float32, g_sum, "dbias")
    assert_close(w.grad, sum_dy_xhat, torch.float32, gxs_sum, "dweight")

    n, s = xv.shape[0], xv.shape[2]
    ch = torch.arange(c, device=DEV).repeat_interleave(3)
    at_n = torch.tensor([0, n // 2, n - 1], device=DEV).repeat(c)
    at_s = torch.tensor([0, s // 2, s - 1], device=DEV).repeat(c)
    xp, dyp = xv[at_n, ch, at_s].double(), dyv[at_n, ch, at_s].double()
    wp, bp, mp, ip = w.detach().double()[ch], b.detach().double()[ch], mean[ch], invstd[ch]
    xhat = (xp - mp) * ip
    y_scale_p = (xp.abs() + mp.abs() + mean_abs[ch]) * ip * wp.abs() + bp.abs()
    assert_close(yv[at_n, ch, at_s], xhat * wp + bp, torch.bfloat16, y_scale_p, "y")
    want_dx = wp * ip * (dyp - sum_dy[ch] / count - xhat * sum_dy_xhat[ch] / count)
    xsp = (xp.abs() + mp.abs()) * ip
    dx_scale = wp.abs() * ip * (dyp.abs() + g_sum[ch] / count + xsp * gxs_sum[ch] / count)
    assert_close(dxv[at_n, ch, at_s], want_dx, torch.bfloat16, dx_scale, "dx")


# ----------------------------------------------------------------------------- running statistics

RUNNING_CASES = [((8, 12, 10, 10), "nchw"), ((8, 12, 10, 10), "nhwc"), ((50, 12), "nchw")]


@pytest.mark.parametrize("momentum", [0.1, 0.7])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", RUNNING_CASES, ids=case_id)
def test_running_stats(case, dtype, momentum):
    """running_mean / running_var (unbiased) against torch's after one step and after three."""
    shape, layout = case
    pdt = param_dtype(dtype)
    c = shape[1]
    w, b = make_params(c, pdt)
    rm, rv = make_running(c, pdt)
    rm_ref, rv_ref = d64(rm), d64(rv)
    mag = torch.zeros(c, device=DEV, dtype=torch.float64)
    for step in range(3):
        x = make_x(shape, dtype, layout, seed=10 + step)
        F.batch_norm(x.double(), rm_ref, rv_ref, d64(w), d64(b), True, momentum, EPS)
        y = reducekit.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum, eps=EPS)
        assert y.dtype == dtype
        mag = mag + x.double().abs().amax(reduce_dims(x)).pow(2)
        if step in (0, 2):
            assert_running_close(rm, rm_ref, pdt, mag.sqrt(), f"running_mean after step {step + 1}")
            assert_running_close(rv, rv_ref, pdt, mag, f"running_var after step {step + 1}")


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_op_saved_statistics(dtype, training, layout):
    """torch.ops.reducekit.batch_norm's save_mean / save_invstd: float32 [C] (float64 for float64),
    the batch mean and 1 / sqrt(biased var + eps) in training, running_mean and
    1 / sqrt(running_var + eps) in eval; fresh tensors, never the running statistics themselves."""
    pdt = param_dtype(dtype)
    x = make_x((6, 10, 5, 5), dtype, layout)
    w, b = make_params(10, pdt)
    rm, rv = make_running(10, pdt)
    rm0, rv0 = rm.clone(), rv.clone()
    y, save_mean, save_invstd = torch.ops.reducekit.batch_norm(x, w, b, rm, rv, training, 0.1, EPS)
    assert_same_format(y, x)
    for t, name in ((save_mean, "save_mean"), (save_invstd, "save_invstd")):
        assert t.dtype == pdt and t.shape == (10,), f"{name}: {t.dtype} {tuple(t.shape)}"
        assert t.data_ptr() not in (rm.data_ptr(), rv.data_ptr()), f"{name} aliases a running statistic"
    mean, invstd = stats64(x, rm0, rv0, training)
    if training:
        assert_close(save_mean, mean, pdt, x.double().abs().amax(reduce_dims(x)), "save_mean")
        assert_close(save_invstd, invstd, pdt, invstd, "save_invstd")
    else:
        assert torch.equal(save_mean, rm0), "eval: save_mean must be running_mean"
        assert_close(save_invstd, invstd, pdt, invstd, "save_invstd")


# ----------------------------------------------------------------------------- backward

def grads(fn, inputs, dy):
    leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in inputs]
    fn(*leaves).backward(dy)
    return [t.grad if t is not None else None for t in leaves]


def check_backward(shape, dtype, layout, training, weight=True, bias=True):
    pdt = param_dtype(dtype)
    x = make_x(shape, dtype, layout)
    c = shape[1]
    w, b = make_params(c, pdt, weight, bias)
    rm, rv = make_running(c, pdt)
    dy = torch.randn(shape, device=DEV).to(dtype)
    if layout.startswith("nhwc"):
        dy = dy.contiguous(memory_format=channels_last_format(len(shape)))
    got = grads(lambda x, w, b: reducekit.batch_norm(x, rm.clone(), rv.clone(), w, b, training=training), [x, w, b],
                dy)
    # The float64 reference runs on the CPU: torch's CUDA backward fails for a bias without a
    # weight ("NativeBatchNormBackward0 returned an invalid gradient at index 2", torch 2.11).
    cpu = [t.detach().double().cpu() if t is not None else None for t in (x, w, b, rm, rv, dy)]
    ref = grads(lambda x, w, b: F.batch_norm(x, cpu[3], cpu[4], w, b, training, 0.1, EPS), cpu[:3], cpu[5])
    ref = [r.to(DEV) if r is not None else None for r in ref]
    mean, invstd = stats64(x, rm, rv, training)
    dims = reduce_dims(x)
    inv = per_channel(invstd, x)
    xs = (x.double().abs() + per_channel(mean.abs(), x)) * inv  # |xhat| and what it rounds at
    g = dy.double().abs()
    wabs = per_channel(w.double().abs(), x) if w is not None else 1
    if training:
        dx_scale = wabs * inv * (g + per_channel(g.mean(dims), x) + xs * per_channel((g * xs).mean(dims), x))
    else:
        dx_scale = wabs * inv * g
    mode = "train" if training else "eval"
    assert_close(got[0], ref[0], dtype, dx_scale, f"dx ({mode})")
    if w is not None:
        assert_close(got[1], ref[1], pdt, (g * xs).sum(dims), f"dweight ({mode})")
    if b is not None:
        assert_close(got[2], ref[2], pdt, g.sum(dims), f"dbias ({mode})")


BACKWARD_CASES = [
    ((37, 5), "nchw"),
    ((8, 3, 100), "nchw"),
    ((4, 6, 7, 7), "nchw"),
    ((4, 6, 7, 7), "nhwc"),
    ((2, 1, 33, 35), "nchw"),
    ((16, 37, 1, 1), "nhwc"),
    ((3, 19, 5, 7, 9), "nchw"),
    ((3, 19, 5, 7, 9), "nhwc"),
    ((16, 4, 128, 128), "nchw"),
    ((8, 64, 40, 40), "nhwc"),
]


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", BACKWARD_CASES, ids=case_id)
def test_backward(case, dtype, training):
    shape, layout = case
    check_backward(shape, dtype, layout, training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_backward_affine_variants(affine, training):
    check_backward((6, 10, 9, 9), torch.float32, "nhwc", training, weight=affine == "weight", bias=affine == "bias")


def test_backward_op_output_mask():
    """batch_norm_backward computes what the mask asks for; the rest is undefined (None) or empty."""
    ops = torch.ops.reducekit
    x = make_x((4, 6, 5, 5), torch.float64, "nhwc")
    w, b = make_params(6, torch.float64)
    rm, rv = make_running(6, torch.float64)
    dy = torch.randn_like(x)
    for training in (True, False):
        _, save_mean, save_invstd = ops.batch_norm(x, w, b, rm.clone(), rv.clone(), training, 0.1, EPS)
        xl, wl, bl = (t.clone().requires_grad_(True) for t in (x, w, b))
        F.batch_norm(xl, rm.clone(), rv.clone(), wl, bl, training, 0.1, EPS).backward(dy)
        want = (xl.grad, wl.grad, bl.grad)
        for mask in ([True, True, True], [True, False, False], [False, True, True], [False, False, True]):
            got = ops.batch_norm_backward(dy, x, w, save_mean, save_invstd, training, mask)
            for k, name in enumerate(("dx", "dweight", "dbias")):
                if mask[k]:
                    torch.testing.assert_close(got[k], want[k], rtol=1e-10, atol=1e-10,
                                               msg=f"{name} with mask {mask}, training={training}")
                    if k == 0:
                        assert_same_format(got[0], x, "dx")
                else:
                    assert got[k] is None or got[k].numel() == 0, f"{name} computed though mask is {mask}"


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_gradcheck(training):
    x = make_x((3, 4, 2, 3), torch.float64).requires_grad_(True)
    w, b = (t.requires_grad_(True) for t in make_params(4, torch.float64))
    rm, rv = make_running(4, torch.float64)
    assert torch.autograd.gradcheck(
        lambda x, w, b: reducekit.batch_norm(x, rm.clone(), rv.clone(), w, b, training=training), (x, w, b))


# ----------------------------------------------------------------------------- determinism

@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_deterministic(dtype, layout):
    """Two runs give the same bits: y, the saved and running statistics, dx, dweight, dbias."""
    shape = (16, 64, 48, 48)
    x = make_x(shape, dtype, layout)
    w, b = make_params(64, torch.float32)
    rm, rv = make_running(64, torch.float32)
    first = None
    for _ in range(3):
        rmc, rvc = rm.clone(), rv.clone()
        outs = torch.ops.reducekit.batch_norm(x, w, b, rmc, rvc, True, 0.1, EPS)
        outs = list(outs) + [rmc, rvc]
        if first is None:
            first = outs
        else:
            for a, c, name in zip(first, outs, ("y", "save_mean", "save_invstd", "running_mean", "running_var")):
                assert torch.equal(a, c), f"{name} differs between runs"
    dy = torch.randn(shape, device=DEV).to(dtype)
    if layout == "nhwc":
        dy = dy.contiguous(memory_format=torch.channels_last)
    fn = (lambda x, w, b: reducekit.batch_norm(x, rm.clone(), rv.clone(), w, b, training=True))
    ref = grads(fn, [x, w, b], dy)
    for _ in range(2):
        for a, c, name in zip(ref, grads(fn, [x, w, b], dy), ("dx", "dweight", "dbias")):
            assert torch.equal(a, c), f"{name} differs between runs"


# ----------------------------------------------------------------------------- edge cases, errors

@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_zero_batch(layout, training):
    """N = 0: an empty y of x's shape; the running statistics as torch leaves them; backward runs."""
    x = make_x((0, 6, 5, 5), torch.float32, layout).requires_grad_(True)
    w, b = (t.requires_grad_(True) for t in make_params(6, torch.float32))
    rm, rv = make_running(6, torch.float32)
    rm_t, rv_t = rm.clone(), rv.clone()
    y = reducekit.batch_norm(x, rm, rv, w, b, training=training)
    torch.cuda.synchronize()
    assert y.shape == x.shape and y.numel() == 0 and y.dtype == x.dtype
    F.batch_norm(x.detach(), rm_t, rv_t, w.detach(), b.detach(), training)
    torch.testing.assert_close(rm, rm_t, equal_nan=True)
    torch.testing.assert_close(rv, rv_t, equal_nan=True)
    y.sum().backward()
    torch.cuda.synchronize()
    assert x.grad is None or x.grad.shape == x.shape
    for g in (w.grad, b.grad):
        assert g is None or bool((g == 0).all()), "gradients over an empty batch must be 0"


def test_one_value_per_channel():
    rm, rv = make_running(8, torch.float32)
    for shape in ((1, 8), (1, 8, 1), (1, 8, 1, 1), (1, 8, 1, 1, 1)):
        x = torch.randn(shape, device=DEV)
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            reducekit.batch_norm(x, rm.clone(), rv.clone(), training=True)
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            reducekit.batch_norm(x, None, None, training=True)
        # eval needs no batch statistics: one value is fine, as in torch
        y = reducekit.batch_norm(x, rm, rv, training=False)
        torch.testing.assert_close(y.double(), F.batch_norm(x.double(), rm.double(), rv.double()), rtol=1e-5,
                                   atol=1e-5)
    # two values per channel are enough
    x = torch.randn(2, 8, device=DEV)
    torch.testing.assert_close(reducekit.batch_norm(x, None, None, training=True).double(),
                               F.batch_norm(x.double(), None, None, training=True), rtol=1e-4, atol=1e-4)


def test_errors():
    x = torch.randn(4, 8, 5, 5, device=DEV)
    rm, rv = make_running(8, torch.float32)
    for training in (True, False):
        with pytest.raises((RuntimeError, ValueError), match="weight"):
            reducekit.batch_norm(x, rm.clone(), rv.clone(), torch.ones(7, device=DEV), None, training=training)
        with pytest.raises((RuntimeError, ValueError), match="bias"):
            reducekit.batch_norm(x, rm.clone(), rv.clone(), None, torch.ones(9, device=DEV), training=training)
        with pytest.raises((RuntimeError, ValueError), match="running_mean"):
            reducekit.batch_norm(x, rm[:7].clone(), rv.clone(), training=training)
        with pytest.raises((RuntimeError, ValueError)):  # on the CPU: no kernel, an error (never a crash)
            reducekit.batch_norm(x.cpu(), rm.cpu(), rv.cpu(), training=training)
    with pytest.raises((RuntimeError, ValueError)):  # inference needs the running statistics, as torch
        reducekit.batch_norm(x, None, None, training=False)
    torch.cuda.synchronize()  # nothing left pending
    assert torch.isfinite(reducekit.batch_norm(x, rm, rv, training=True)).all()


# ----------------------------------------------------------------------------- modules

def randomized(ref):
    with torch.no_grad():
        if ref.weight is not None:
            ref.weight.copy_(1 + 0.5 * torch.randn_like(ref.weight))
            ref.bias.copy_(0.5 * torch.randn_like(ref.bias))
        if ref.running_mean is not None:
            ref.running_mean.copy_(0.5 * torch.randn_like(ref.running_mean))
            ref.running_var.copy_(0.5 + torch.rand_like(ref.running_var))
            ref.num_batches_tracked.fill_(5)
    return ref


def check_module_output(y, want, x, mod_ref, batch):
    """y against the float64 module's output; `batch`: normalized by the batch's statistics."""
    mean, invstd = stats64(x, mod_ref.running_mean, mod_ref.running_var, batch)
    assert_close(y.detach(), want.detach(), x.dtype, y_scale(x, mean, invstd, d64(mod_ref.weight), d64(mod_ref.bias)),
                 "module output")
    assert_same_format(y, x)


MODULE_CASES = [("BatchNorm1d", (16, 12)), ("BatchNorm1d", (8, 12, 20)), ("BatchNorm2d", (4, 12, 9, 9)),
                ("BatchNorm3d", (2, 12, 3, 5, 7))]


@pytest.mark.parametrize("cls,shape", MODULE_CASES, ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_module_loads_torch_state_dict(cls, shape):
    """reducekit.nn.BatchNormXd is torch's: a torch state dict loads strictly, train() and eval()
    give torch's outputs and running statistics, num_batches_tracked counts the training calls."""
    ref = randomized(getattr(torch.nn, cls)(12).to(DEV))
    mod = getattr(reducekit.nn, cls)(12).to(DEV)
    assert isinstance(mod, getattr(torch.nn, cls))
    mod.load_state_dict(ref.state_dict(), strict=True)
    assert list(mod.state_dict()) == list(ref.state_dict())
    ref64 = copy.deepcopy(ref).double()
    mod.train()
    ref64.train()
    for step in range(2):
        x = make_x(shape, torch.float32, seed=20 + step)
        y = mod(x)
        want = ref64(x.double())
        check_module_output(y, want, x, ref64, batch=True)
        mag = x.double().abs().amax(reduce_dims(x)).pow(2)
        assert_running_close(mod.running_mean, ref64.running_mean, torch.float32, mag.sqrt(), "running_mean")
        assert_running_close(mod.running_var, ref64.running_var, torch.float32, mag, "running_var")
    assert int(mod.num_batches_tracked) == int(ref64.num_batches_tracked) == 7
    # backward through the module in training
    x = make_x(shape, torch.float32, seed=30).requires_grad_(True)
    x64 = x.detach().double().requires_grad_(True)
    dy = torch.randn(shape, device=DEV)
    mod(x).backward(dy)
    ref64(x64).backward(dy.double())
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mod.weight.grad.double(), ref64.weight.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(mod.bias.grad.double(), ref64.bias.grad, rtol=1e-4, atol=1e-3)
    mod.eval()
    ref64.eval()
    rm0 = mod.running_mean.clone()
    x = make_x(shape, torch.float32, seed=40)
    y = mod(x)
    check_module_output(y, ref64(x.double()), x, ref64, batch=False)
    assert torch.equal(mod.running_mean, rm0) and int(mod.num_batches_tracked) == 8
    bad_rank = {"BatchNorm1d": (2, 12, 3, 3), "BatchNorm2d": (2, 12, 3), "BatchNorm3d": (2, 12, 3, 3)}[cls]
    with pytest.raises(ValueError):
        mod(torch.randn(bad_rank, device=DEV))


@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
def test_module_16bit_input(dtype):
    """16-bit activations with float32 parameters and buffers (torch's mixed precision)."""
    ref = randomized(torch.nn.BatchNorm2d(12).to(DEV))
    mod = reducekit.nn.BatchNorm2d(12).to(DEV)
    mod.load_state_dict(ref.state_dict())
    ref64 = copy.deepcopy(ref).double()
    x = make_x((4, 12, 9, 9), dtype, "nhwc")
    y = mod(x)
    assert y.dtype == dtype and mod.running_mean.dtype == torch.float32
    check_module_output(y, ref64(x.double()), x, ref64, batch=True)
    mag = x.double().abs().amax(reduce_dims(x)).pow(2)
    assert_running_close(mod.running_var, ref64.running_var, torch.float32, mag, "running_var")


def test_module_momentum_none():
    """momentum=None: the cumulative average, 1 / num_batches_tracked a step."""
    mod = reducekit.nn.BatchNorm2d(12, momentum=None).to(DEV)
    ref64 = torch.nn.BatchNorm2d(12, momentum=None).to(DEV).double()
    mag = torch.zeros(12, device=DEV, dtype=torch.float64)
    for step in range(3):
        x = make_x((4, 12, 6, 6), torch.float32, "nhwc", seed=50 + step)
        check_module_output(mod(x), ref64(x.double()), x, ref64, batch=True)
        mag = mag + x.double().abs().amax(reduce_dims(x)).pow(2)
        assert int(mod.num_batches_tracked) == step + 1
        assert_running_close(mod.running_mean, ref64.running_mean, torch.float32, mag.sqrt(),
                             f"running_mean after step {step + 1}")
        assert_running_close(mod.running_var, ref64.running_var, torch.float32, mag,
                             f"running_var after step {step + 1}")


@pytest.mark.parametrize("affine", [True, False])
def test_module_without_running_stats(affine):
    """track_running_stats=False: no buffers; batch statistics in train() and eval() alike."""
    mod = reducekit.nn.BatchNorm2d(12, affine=affine, track_running_stats=False).to(DEV)
    ref = torch.nn.BatchNorm2d(12, affine=affine, track_running_stats=False).to(DEV)
    if affine:
        randomized(ref)
        mod.load_state_dict(ref.state_dict())
    assert mod.running_mean is None and mod.running_var is None and mod.num_batches_tracked is None
    assert list(mod.state_dict()) == list(ref.state_dict())
    ref64 = copy.deepcopy(ref).double()
    for training in (True, False):
        mod.train(training)
        ref64.train(training)
        x = make_x((4, 12, 7, 7), torch.float32, "nchw", seed=60)
        check_module_output(mod(x), ref64(x.double()), x, ref64, batch=True)


# ----------------------------------------------------------------------------- torch integration

def test_opcheck():
    ops = torch.ops.reducekit
    x = make_x((4, 6, 5, 5), torch.float32).requires_grad_(True)
    xcl = make_x((4, 6, 5, 5), torch.float32, "nhwc").requires_grad_(True)
    w, b = (t.requires_grad_(True) for t in make_params(6, torch.float32))
    rm, rv = make_running(6, torch.float32)
    torch.library.opcheck(ops.batch_norm.default, (x, w, b, rm, rv, False, 0.1, EPS))           # eval
    torch.library.opcheck(ops.batch_norm.default, (x, w, b, None, None, True, 0.1, EPS))        # batch stats only
    torch.library.opcheck(ops.batch_norm.default, (x, w, b, rm, rv, True, 0.1, EPS))            # running stats mutate
    torch.library.opcheck(ops.batch_norm.default, (xcl, None, None, rm, rv, True, 0.1, EPS))    # channels_last
    xb = make_x((4, 6, 5, 5), torch.bfloat16, "nhwc").requires_grad_(True)
    torch.library.opcheck(ops.batch_norm.default, (xb, w, b, rm, rv, False, 0.1, EPS))          # 16-bit x
    xd, wd = x.detach(), w.detach()
    dy = torch.randn_like(xd)
    for training in (True, False):
        _, save_mean, save_invstd = ops.batch_norm(xd, wd, b.detach(), rm.clone(), rv.clone(), training, 0.1, EPS)
        torch.library.opcheck(ops.batch_norm_backward.default,
                              (dy, xd, wd, save_mean, save_invstd, training, [True, True, True]))
        torch.library.opcheck(ops.batch_norm_backward.default,
                              (dy, xd, None, save_mean, save_invstd, training, [True, False, False]))


def test_compile_fullgraph():
    """torch.compile(fullgraph=True) of reducekit.batch_norm in training with running statistics,
    and of a reducekit.nn.BatchNorm2d: the outputs, gradients and buffers of eager."""
    w, b = make_params(16, torch.float32)

    def f(x, w, b, rm, rv):
        y = reducekit.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=EPS)
        return torch.relu(y) * 2

    compiled = torch.compile(f, fullgraph=True)
    rm_c, rv_c = make_running(16, torch.float32)
    rm_e, rv_e = rm_c.clone(), rv_c.clone()
    for step in range(2):
        x = make_x((8, 16, 12, 12), torch.float32, "nhwc" if step else "nchw", seed=70 + step)
        xc, wc, bc = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
        xe, we, be = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
        yc = compiled(xc, wc, bc, rm_c, rv_c)
        ye = f(xe, we, be, rm_e, rv_e)
        torch.testing.assert_close(yc, ye)
        torch.testing.assert_close(rm_c, rm_e)
        torch.testing.assert_close(rv_c, rv_e)
        dy = torch.randn_like(ye)
        yc.backward(dy)
        ye.backward(dy)
        for a, e, name in ((xc, xe, "dx"), (wc, we, "dweight"), (bc, be, "dbias")):
            torch.testing.assert_close(a.grad, e.grad, msg=name)

    eager = randomized(reducekit.nn.BatchNorm2d(16).to(DEV))
    mod = copy.deepcopy(eager)
    compiled_mod = torch.compile(mod, fullgraph=True)
    for step in range(2):
        x = make_x((8, 16, 12, 12), torch.float32, "nhwc", seed=80 + step)
        torch.testing.assert_close(compiled_mod(x), eager(x))
    for name, buf in eager.named_buffers():
        torch.testing.assert_close(dict(mod.named_buffers())[name], buf, msg=name)
    assert int(mod.num_batches_tracked) == 7


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_cuda_graph_replays(training):
    """The forward captured in a CUDA graph (training: its workspace from the graph's pool) and
    replayed gives what an eager call gives on the same input and running statistics."""
    shape = (16, 32, 56, 56)
    x = make_x(shape, torch.bfloat16, "nhwc")
    w, b = make_params(32, torch.float32)
    rm0, rv0 = make_running(32, torch.float32)
    rm, rv = rm0.clone(), rv0.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        reducekit.batch_norm(x, rm.clone(), rv.clone(), w, b, training=training)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = reducekit.batch_norm(x, rm, rv, w, b, training=training)
    for step in range(3):
        x.copy_(make_x(shape, torch.bfloat16, "nhwc", seed=90 + step))
        rm.copy_(rm0)
        rv.copy_(rv0)
        graph.replay()
        rm_e, rv_e = rm0.clone(), rv0.clone()
        want = reducekit.batch_norm(x, rm_e, rv_e, w, b, training=training)
        torch.cuda.synchronize()
        assert torch.equal(y, want), "graph replay differs from an eager call"
        assert torch.equal(rm, rm_e) and torch.equal(rv, rv_e), "running statistics differ from an eager call"
    assert math.isfinite(float(y.float().abs().max()))
