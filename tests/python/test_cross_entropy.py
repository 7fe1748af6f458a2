# SPDX-License-Identifier: Apache-2.0
"""reducekit.cross_entropy against torch.nn.functional.cross_entropy (computed in float64) and
the z-loss / soft-cap extras against their formulas: dtypes, reductions, class weights,
ignore_index, label smoothing, unbatched and [N, C, d] inputs, odd vocabularies, backward,
out-of-range targets and check_targets, determinism, opcheck, torch.compile, the nn module, and
class-probability targets (against torch in float64, gradcheck, 16-bit against a float64
reference)."""
import pytest
import torch
import torch.nn.functional as F

import reducekit
from tolerance import assert_close

DEV = "cuda"
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
TOL = {torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (2e-2, 2e-2),
       torch.float16: (2e-3, 2e-3)}


def _inputs(rows, classes, dtype, seed=0, ignore=True):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (3 * torch.randn(rows, classes, device=DEV, generator=g)).to(dtype)
    t = torch.randint(0, classes, (rows,), device=DEV, generator=g)
    if ignore and rows > 2:
        t[1] = -100
    return x, t


def _torch_loss(x, t, weight=None, reduction="mean", label_smoothing=0.0):
    w = None if weight is None else weight.double()
    return F.cross_entropy(x.double(), t, w, reduction=reduction, label_smoothing=label_smoothing)


def _close(got, want, dtype):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)


def assert_grad_close(got, want, logits, target, weight, grad, reduction, label_smoothing, what,
                      ignore_index=-100):
    """dlogits of class-index targets over [rows, classes] logits (no z-loss, no soft-cap) against
    torch's float64 gradient `want`: TOL, plus what the rounding of the saved lse moves.

    The backward takes the forward's lse in the accumulation dtype (float32 for float32 and 16-bit
    logits; include/reducekit/loss.hpp), rounded at its own magnitude: |lse' - lse| <= eps |lse|
    (half a unit from its final rounding, up to half a unit more from log(sum) and the sum behind
    it, where |lse| is not small). p_j = exp(z_j - lse') then has a relative error of eps |lse|, and
    d_j = p_j P - T_j (P: the row's upstream gradient times (1 - ls) w[t] + ls W / C; T_j: the
    target and smoothing terms, which lse does not enter) an absolute one of p_j |P| eps |lse|. At
    |lse| = 2e4 in float32 that is 2.4e-3 p_j |P|: far above TOL where p_t is near 1 and
    d_t = P (p_t - 1) is small. Where |lse| is small the term is negligible and TOL decides."""
    rtol, atol = TOL[logits.dtype]
    assert got is not None and got.dtype == logits.dtype and got.shape == want.shape, \
        f"{what}: dlogits {None if got is None else (got.dtype, tuple(got.shape))}, expected " \
        f"{(logits.dtype, tuple(want.shape))}"
    o = got.double()
    assert torch.equal(o.isnan(), want.isnan()), \
        f"{what}: NaN pattern differs at {(o.isnan() != want.isnan()).nonzero()[:4].tolist()}"
    x = logits.double()
    lse = torch.logsumexp(x, 1, keepdim=True)
    p = (x - lse).exp()
    classes = x.shape[1]
    kept = target != ignore_index
    w = weight.double() if weight is not None else torch.ones(classes, device=x.device, dtype=torch.float64)
    wt = torch.where(kept, w[target.clamp(0, classes - 1)], 0.0)
    coef = (1 - label_smoothing) * wt + label_smoothing * w.sum() / classes * kept
    g = grad.double()
    row_grad = g if reduction == "none" else (g / wt.sum() if reduction == "mean" else g).expand(coef.shape)
    acc_eps = torch.finfo(torch.float64 if logits.dtype == torch.float64 else torch.float32).eps
    upstream = torch.where(kept, row_grad * coef, 0.0)  # P; ignored rows (also 'mean' over none kept) have none
    shift = p * upstream.abs().unsqueeze(1) * acc_eps * lse.abs()
    allowed = atol + rtol * want.abs() + shift
    err = (o - want).abs()
    bad = want.isfinite() & ~(err <= allowed)
    if bool(bad.any()):
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} off; first at {i}: got {o[i].item()!r}, "
                             f"want {want[i].item()!r}, allowed {allowed[i].item()!r} (TOL {rtol:g}/{atol:g}, "
                             f"lse {lse[i[0], 0].item()!r}, p {p[i].item()!r})")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("classes", [1, 7, 1000, 50257])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_matches_torch(dtype, classes, reduction):
    x, t = _inputs(33, classes, dtype)
    got = reducekit.cross_entropy(x, t, reduction=reduction)
    assert got.dtype == dtype
    _close(got, _torch_loss(x, t, reduction=reduction), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_weights_and_smoothing(dtype, label_smoothing, weighted, reduction):
    x, t = _inputs(40, 1003, dtype, seed=1)
    w = torch.rand(1003, device=DEV) + 0.5 if weighted else None
    got = reducekit.cross_entropy(x, t, w, reduction=reduction, label_smoothing=label_smoothing)
    _close(got, _torch_loss(x, t, w, reduction, label_smoothing), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_backward_matches_torch(dtype):
    x, t = _inputs(24, 4099, dtype, seed=2)
    w = torch.rand(4099, device=DEV) + 0.5
    a = x.clone().requires_grad_()
    b = x.double().clone().requires_grad_()
    reducekit.cross_entropy(a, t, w, label_smoothing=0.1).backward()
    F.cross_entropy(b, t, w.double(), label_smoothing=0.1).backward()
    _close(a.grad, b.grad, dtype)


# test_properties.py's shrunk case (logits as it printed them): float32 logits of magnitude up to
# 3e4, reduction 'none'. Row 24 holds 6560.3208 and 6556.0273 beside far smaller logits; with the
# target at either, the loss is 0.0136 or 4.307, and the forward's lse - z_t came out 1.07e-4 off
# (lse rounds at 2.4e-4 there), over TOL's 2e-5. The targets here are each row's largest logit
# (losses 0 but row 24's) and then the second largest.
LARGE_LOGITS = [
    [-8997.8047, -6844.5225, 20507.5371, 1022.8395, 3309.7573],
    [-5734.5850, 11926.6035, 17273.2871, -5234.8110, -6630.6323],
    [9305.0225, 9198.6133, 2097.4185, -18276.1758, 50.8268],
    [-11176.8301, 7903.8301, -7302.8945, -11919.1162, -5241.4038],
    [458.2126, 5551.5469, 18987.1074, 2845.3936, -2054.6414],
    [3242.4746, -9293.6719, 9446.1768, 2322.3008, 4028.9500],
    [1551.8762, -31036.5801, 16716.9902, 1848.2036, 16307.4062],
    [219.9444, 42.4369, 2656.5952, 22002.5586, 1153.0774],
    [-979.3259, -1735.4746, 719.7349, -1825.7885, -1039.8263],
    [459.8654, 388.5012, 8590.8018, -3801.1658, -3533.2063],
    [13304.4004, 4712.5552, -14626.7686, 1512.6057, 23067.7676],
    [6473.7524, -12737.4658, -3497.9441, -1171.6932, -5173.2529],
    [12580.7256, 2367.0405, 15751.7246, 2251.6272, -6126.5547],
    [-10111.5381, 7901.0640, 9270.6221, -9115.7656, -7567.8633],
    [23812.7520, -8170.5444, 19977.7344, -12727.0156, -13323.8057],
    [4903.3862, 4118.0752, -12833.4873, 22470.8984, 3859.4302],
    [-6536.8115, 8284.6240, -14101.7549, -10778.7539, -3652.3132],
    [-26263.9590, -15117.8574, -735.7189, 8149.8364, 4118.9155],
    [-20451.7988, -7673.7334, 4944.0825, -27036.2363, 3370.4658],
    [5429.6758, 8700.0840, 1409.0303, -6101.0669, -840.8577],
    [-427.9713, 8059.5513, -9219.3770, 1705.3182, -395.6737],
    [-13772.1631, 10583.6006, 6471.3354, 2307.5854, 1853.4999],
    [-13326.3750, -7706.4043, -12752.2412, -8089.8354, -11915.0010],
    [-14164.4785, -654.7705, -13236.6074, 705.3505, 13924.6650],
    [6560.3208, -8864.6621, -2272.2744, -8420.7266, 6556.0273],
    [18411.6602, 19758.6562, -15274.3359, 7921.4717, 10017.7881],
    [4516.1855, -16402.8457, 49.0505, -2296.9517, -13656.8232],
    [-16692.4766, 83.5719, 22693.4355, -16605.9434, -1366.5779],
    [-5103.2607, 3402.2292, 9827.9697, -5557.0874, 5009.2749],
    [4271.1187, 1387.0646, -6900.1655, -12362.4902, 3525.7515],
    [2160.7708, -1070.2140, -11232.6777, 822.4126, -14304.6123]]


@pytest.mark.parametrize("rank", [0, 1], ids=["largest", "second"])
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_large_logits_small_losses(reduction, rank):
    x = torch.tensor(LARGE_LOGITS, device=DEV)
    t = x.argsort(1, descending=True)[:, rank].contiguous()
    xa, xb = x.clone().requires_grad_(), x.double().requires_grad_()
    got = reducekit.cross_entropy(xa, t, reduction=reduction)
    want = F.cross_entropy(xb, t, reduction=reduction)
    rtol, atol = TOL[torch.float32]
    torch.testing.assert_close(got.double(), want.detach(), rtol=rtol, atol=atol,
                               msg=lambda detail: f"loss, targets of rank {rank}: {detail}")
    g = torch.linspace(-2, 2, got.numel(), device=DEV, dtype=torch.float64).view(got.shape)
    got.backward(g.float())
    want.backward(g)
    assert_grad_close(xa.grad, xb.grad, x, t, None, g, reduction, 0.0, f"dlogits, targets of rank {rank}")


def test_z_loss_and_softcap_formulas():
    x, t = _inputs(16, 2000, torch.float32, seed=3)
    cap, s = 20.0, 1e-3
    a = x.clone().requires_grad_()
    b = x.double().clone().requires_grad_()
    got = reducekit.cross_entropy(a, t, reduction="none", lse_square_scale=s, softcap=cap)
    z = cap * torch.tanh(b / cap)
    lse = torch.logsumexp(z, -1)
    kept = t != -100
    want = torch.where(kept, F.cross_entropy(z, t, reduction="none") + s * lse * lse, torch.zeros_like(lse))
    _close(got, want, torch.float32)
    got.sum().backward()
    want.sum().backward()
    _close(a.grad, b.grad, torch.float32)


def test_unbatched_and_spatial_inputs():
    x, t = _inputs(1, 11, torch.float32, seed=4, ignore=False)
    _close(reducekit.cross_entropy(x[0], t[0]), _torch_loss(x[0], t[0]), torch.float32)
    g = torch.Generator(device=DEV).manual_seed(5)
    x4 = torch.randn(2, 9, 3, 5, device=DEV, generator=g)
    t4 = torch.randint(0, 9, (2, 3, 5), device=DEV, generator=g)
    for reduction in ("none", "mean"):
        _close(reducekit.cross_entropy(x4, t4, reduction=reduction), _torch_loss(x4, t4, reduction=reduction),
               torch.float32)


def test_sliced_and_odd_rows():
    wide = torch.randn(64, 50264, device=DEV, dtype=torch.bfloat16)
    x = wide[:, 3:50260]  # rows of 50257 at an odd offset and stride
    t = torch.randint(0, 50257, (64,), device=DEV)
    _close(reducekit.cross_entropy(x, t, reduction="none"), _torch_loss(x, t, reduction="none"), torch.bfloat16)


def test_all_ignored_mean_is_nan():
    x, _ = _inputs(4, 10, torch.float32)
    t = torch.full((4,), -100, device=DEV)
    assert torch.isnan(reducekit.cross_entropy(x, t))
    assert torch.isnan(F.cross_entropy(x, t))


def test_out_of_range_target_gives_nan_without_killing_the_context():
    x, t = _inputs(4, 10, torch.float32, ignore=False)
    t[2] = 10
    loss = reducekit.cross_entropy(x, t, reduction="none")
    assert torch.isnan(loss[2]) and torch.isfinite(loss[[0, 1, 3]]).all()
    torch.cuda.synchronize()  # no device-side assert pending
    assert torch.isfinite(reducekit.cross_entropy(x[:2], t[:2]))


def test_deterministic_and_batch_invariant():
    x, t = _inputs(300, 32000, torch.bfloat16, seed=6)
    all_rows = reducekit.cross_entropy(x, t, reduction="none")
    assert torch.equal(all_rows, reducekit.cross_entropy(x, t, reduction="none"))
    for r in (0, 5, 299):
        assert torch.equal(reducekit.cross_entropy(x[r:r + 1], t[r:r + 1], reduction="none"), all_rows[r:r + 1])
    assert torch.equal(reducekit.cross_entropy(x, t), reducekit.cross_entropy(x, t))


def test_opcheck():
    x, t = _inputs(8, 100, torch.float32, seed=7)
    w = torch.rand(100, device=DEV)
    torch.library.opcheck(torch.ops.reducekit.cross_entropy_forward.default, (x.requires_grad_(), t, w, -100, 0.1, 1e-4, 0.0))


def test_loss_and_reduce_opcheck():
    x, t = _inputs(8, 100, torch.float32, seed=7)
    w = torch.rand(100, device=DEV)
    for reduction in ("mean", "sum"):
        torch.library.opcheck(torch.ops.reducekit.cross_entropy_loss.default,
                              (x.clone().requires_grad_(), t, w, -100, reduction, 0.1, 1e-4, 0.0))
        loss, _ = torch.ops.reducekit.cross_entropy_forward(x, t, w, -100, 0.1, 1e-4, 0.0)
        for given in (loss, None):
            torch.library.opcheck(torch.ops.reducekit.cross_entropy_reduce.default,
                                  (given, t, w, -100, reduction, torch.bfloat16))
    with pytest.raises(RuntimeError, match="reduction"):
        torch.ops.reducekit.cross_entropy_loss(x, t, None, -100, "none")
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.reducekit.cross_entropy_reduce(None, t, None, -100, "sum", torch.int64)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_reduced_loss_is_the_reduce_of_the_row_losses(reduction, weighted):
    """'mean' / 'sum' (one op, torch.ops.reducekit.cross_entropy_loss) against the per-row losses
    reduced by cross_entropy_reduce, bit for bit; the backward (one upstream gradient, the loss's
    over the denominator, for every row) against the per-row losses' backward with that value
    repeated a row, bit for bit."""
    x, t = _inputs(300, 1003, torch.float32, seed=16)
    w = torch.rand(1003, device=DEV) + 0.5 if weighted else None
    a = x.clone().requires_grad_()
    loss = reducekit.cross_entropy(a, t, w, reduction=reduction, label_smoothing=0.1)
    loss.backward(torch.tensor(0.75, device=DEV))
    b = x.clone().requires_grad_()
    rows = reducekit.cross_entropy(b, t, w, reduction="none", label_smoothing=0.1)
    want, denominator = torch.ops.reducekit.cross_entropy_reduce(rows.detach(), t, w, -100, reduction, torch.float32)
    assert torch.equal(loss, want)
    kept = (t != -100).double() * (w.double()[t.clamp(0)] if weighted else 1.0)
    assert denominator.item() == pytest.approx(kept.sum().item() if reduction == "mean" else 1.0, rel=1e-6)
    rows.backward(torch.full_like(rows, 0.75) / denominator)
    assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_class_weights_requiring_a_gradient_raise_in_backward_as_torch(reduction):
    x, t = _inputs(8, 100, torch.float32, seed=18)
    w = (torch.rand(100, device=DEV) + 0.5).requires_grad_()
    with pytest.raises(RuntimeError, match="weight"):
        F.cross_entropy(x.clone().requires_grad_(), t, w, reduction=reduction).sum().backward()
    with pytest.raises(RuntimeError, match="weight: the gradient"):
        reducekit.cross_entropy(x.clone().requires_grad_(), t, w, reduction=reduction).sum().backward()
    a = x.clone().requires_grad_()
    reducekit.cross_entropy(a, t, w.detach(), reduction=reduction).sum().backward()
    assert a.grad is not None


def test_compile_backward():
    torch._dynamo.reset()
    x, t = _inputs(16, 257, torch.bfloat16, seed=17)
    w = torch.rand(257, device=DEV) + 0.5

    def loss(x, t, w):
        return reducekit.cross_entropy(x, t, w, label_smoothing=0.1) + reducekit.cross_entropy(x, t, reduction="sum")

    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = torch.compile(loss, fullgraph=True)(a, t, w)
    want = loss(b, t, w)
    got.backward()
    want.backward()
    assert torch.equal(got, want)
    assert torch.equal(a.grad, b.grad)


def test_nn_module():
    x, t = _inputs(16, 50, torch.float32, seed=8)
    w = torch.rand(50, device=DEV) + 0.5
    ours = reducekit.nn.CrossEntropyLoss(weight=w, label_smoothing=0.05)
    theirs = torch.nn.CrossEntropyLoss(weight=w.double(), label_smoothing=0.05)
    _close(ours(x, t), theirs(x.double(), t), torch.float32)


def test_errors():
    x, t = _inputs(4, 10, torch.float32)
    with pytest.raises(RuntimeError, match="label_smoothing"):
        reducekit.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(RuntimeError, match="weight"):
        reducekit.cross_entropy(x, t, torch.ones(9, device=DEV))
    with pytest.raises(RuntimeError, match="target"):
        reducekit.cross_entropy(x, t[:3])
    with pytest.raises(ValueError, match="target"):  # floating point: probabilities, which need x's shape
        reducekit.cross_entropy(x, torch.softmax(x, -1)[:, :9])
    with pytest.raises(ValueError, match="target"):
        reducekit.cross_entropy(x, t.float())


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("options", [{}, {"label_smoothing": 0.1, "weighted": True},
                                     {"lse_square_scale": 1e-2, "softcap": 3.0}], ids=["plain", "ls_w", "z_cap"])
def test_gradcheck(reduction, options):
    """Class-index targets in float64 (one row ignored) against numerical derivatives."""
    options = dict(options)
    x, t = _inputs(5, 7, torch.float64, seed=33)
    w = torch.rand(7, device=DEV, dtype=torch.float64) + 0.5 if options.pop("weighted", False) else None
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda x: reducekit.cross_entropy(x, t, w, reduction=reduction, **options), (x,))


@pytest.mark.parametrize("targets", ["indices", "probabilities"])
def test_cuda_graph_replays(targets, fused_probabilities):
    """A training step (the 'mean' loss and its autograd backward; for class indices also
    cross_entropy_with_grad) captured in a CUDA graph and replayed on new logits gives an eager
    step's bits: no host sync and no allocation outside torch's allocator on the way."""
    rows, classes = 64, 50257
    x, t = _inputs(rows, classes, torch.bfloat16, seed=34)
    if targets == "probabilities":
        t = torch.softmax(torch.randn(rows, classes, device=DEV), 1).to(torch.bfloat16)
    leaf = x.detach().requires_grad_()

    def step():
        leaf.grad = None
        loss = reducekit.cross_entropy(leaf, t)
        loss.backward()
        fused = reducekit.cross_entropy_with_grad(x, t) if targets == "indices" else None
        return loss, leaf.grad, fused

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch.cuda.graph's docs ask
        step()
    torch.cuda.current_stream().wait_stream(side)
    leaf.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss, grad, fused = step()
    for seed in (35, 36):
        x.copy_(_inputs(rows, classes, torch.bfloat16, seed=seed)[0])
        graph.replay()
        torch.cuda.synchronize()
        eager = x.detach().requires_grad_()
        want = reducekit.cross_entropy(eager, t)
        want.backward()
        assert torch.equal(loss, want.detach()), "the replayed loss"
        assert torch.equal(grad, eager.grad), "the replayed gradient"
        if fused is not None:
            want_fused = reducekit.cross_entropy_with_grad(x, t)
            assert torch.equal(fused[0], want_fused[0]) and torch.equal(fused[1], want_fused[1]), \
                "the replayed cross_entropy_with_grad"


@pytest.mark.parametrize("targets", ["indices", "probabilities"])
def test_peak_memory_of_a_training_step(targets, fused_probabilities):
    """Issue 16's memory bounds: forward and backward hold nothing of the logits' size beyond
    the gradient (O(rows) floats besides), and cross_entropy_with_grad(inplace=True) nothing of
    it at all (torch's step holds its log-probabilities and their gradient besides)."""
    rows, classes = 2048, 50257
    x, t = _inputs(rows, classes, torch.bfloat16, seed=37)
    if targets == "probabilities":
        t = torch.softmax(torch.randn(rows, classes, device=DEV), 1).to(torch.bfloat16)
    small = 64 * rows + (1 << 20)  # per-row values (loss, lse, mass, upstream gradients) and workspaces
    leaf = x.detach().requires_grad_()

    def peak_beyond(run):
        run()  # workspaces come from the caching allocator once
        leaf.grad = None
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    extra = peak_beyond(lambda: reducekit.cross_entropy(leaf, t).backward()) - leaf.grad.nbytes
    assert extra <= small, f"forward + backward: {extra / 2**20:.1f} MiB beyond the gradient"
    if targets == "indices":
        logits = x.clone()
        extra = peak_beyond(lambda: reducekit.cross_entropy_with_grad(logits, t, inplace=True))
        assert extra <= small, f"the in-place step: {extra / 2**20:.1f} MiB beyond its inputs"


# ----------------------------------------------------------------------------- check_targets

@pytest.mark.parametrize("bad", [10, 11, 12345, -1, -101])
def test_check_targets_raises_naming_the_first_bad_target(bad):
    x, t = _inputs(8, 10, torch.float32, seed=9)  # t[1] is ignore_index (-100)
    t[3] = bad
    t[6] = 10  # a later bad target: not the one named
    with pytest.raises(ValueError, match=rf"target: {bad} at flattened index 3 .*\[0, 10\)"):
        reducekit.cross_entropy(x, t, check_targets=True)
    with pytest.raises(ValueError, match=rf"target: {bad} at flattened index 3"):
        reducekit.cross_entropy(x, t, reduction="none", check_targets=True)
    loss = reducekit.cross_entropy(x, t, reduction="none")  # default: no check, the bad rows NaN
    assert torch.isnan(loss[3]) and torch.isnan(loss[6]) and not torch.isnan(loss[[0, 1, 2, 4, 5, 7]]).any()


def test_check_targets_positions_of_spatial_and_unbatched_targets():
    g = torch.Generator(device=DEV).manual_seed(10)
    x = torch.randn(2, 5, 3, 4, device=DEV, generator=g)
    t = torch.randint(0, 5, (2, 3, 4), device=DEV, generator=g)
    t[1, 2, 1] = 5  # flattened index 1 * 12 + 2 * 4 + 1 = 21
    with pytest.raises(ValueError, match=r"target: 5 at flattened index 21 "):
        reducekit.cross_entropy(x, t, check_targets=True)
    with pytest.raises(ValueError, match=r"target: -3 at flattened index 0 "):
        reducekit.cross_entropy(x[0, :, 0, 0], torch.tensor(-3, device=DEV), check_targets=True)


def test_check_targets_passes_valid_targets_and_ignore_index():
    x, t = _inputs(33, 50, torch.float32, seed=11)  # t[1] = -100, the default ignore_index
    t[0], t[2] = 0, 49  # both ends of [0, C)
    for kwargs in ({}, {"reduction": "none"}, {"reduction": "sum", "label_smoothing": 0.1}):
        checked = reducekit.cross_entropy(x, t, check_targets=True, **kwargs)
        assert torch.equal(checked, reducekit.cross_entropy(x, t, **kwargs))
        _close(checked, _torch_loss(x, t, **kwargs), torch.float32)
    t[1] = 77  # another ignore_index, outside [0, C)
    got = reducekit.cross_entropy(x, t, ignore_index=77, check_targets=True)
    _close(got, F.cross_entropy(x.double(), torch.where(t == 77, -100, t)), torch.float32)
    t[1] = -7
    got = reducekit.cross_entropy(x, t, ignore_index=-7, reduction="none", check_targets=True)
    assert got[1] == 0
    with pytest.raises(ValueError, match=r"target: -7 at flattened index 1 .*ignore_index \(-100\)"):
        reducekit.cross_entropy(x, t, check_targets=True)
    empty = reducekit.cross_entropy(x[:0], t[:0], reduction="sum", check_targets=True)
    assert empty.item() == 0


def test_check_targets_default_path_is_the_unchecked_one():
    x, t = _inputs(16, 300, torch.bfloat16, seed=12)
    a = reducekit.cross_entropy(x, t, reduction="none")
    assert torch.equal(a, reducekit.cross_entropy(x, t, reduction="none", check_targets=False))
    assert torch.equal(a, reducekit.cross_entropy(x, t, reduction="none", check_targets=True))


def test_nn_module_check_targets():
    x, t = _inputs(6, 20, torch.float32, seed=13)
    t[4] = 20
    assert torch.isnan(reducekit.nn.CrossEntropyLoss()(x, t))
    assert reducekit.nn.CrossEntropyLoss().check_targets is False
    with pytest.raises(ValueError, match=r"target: 20 at flattened index 4 "):
        reducekit.nn.CrossEntropyLoss(check_targets=True)(x, t)


def test_compile_fullgraph(probability_path):
    torch._dynamo.reset()
    x, t = _inputs(16, 257, torch.float32, seed=14)
    p = torch.softmax(torch.randn(16, 257, device=DEV), -1)
    w = torch.rand(257, device=DEV) + 0.5

    def loss(x, t, p, w):
        return (reducekit.cross_entropy(x, t, w, label_smoothing=0.1),
                reducekit.cross_entropy(x, p, w, label_smoothing=0.1, reduction="none"))

    compiled = torch.compile(loss, fullgraph=True)(x, t, p, w)
    for got, want in zip(compiled, loss(x, t, p, w)):
        _close(got, want, torch.float32)

    def checked(x, t):
        return reducekit.cross_entropy(x, t, check_targets=True)

    t[5] = 300
    with pytest.raises(ValueError, match=r"target: 300 at flattened index 5 "):
        torch.compile(checked)(x, t)  # a graph break at the check, the error still raised


# ----------------------------------------------------------------------------- probability targets

SHAPES = {"NC": (33, 1000), "C": (37,), "NCHW": (2, 9, 3, 5)}


@pytest.fixture(params=["composed", "fused"])
def probability_path(request, monkeypatch):
    """Both paths of same-dtype probability targets: the composed ops, and the fused kernels
    (reducekit._loss._FUSED_PROBABILITY_TARGETS, on by default)."""
    monkeypatch.setattr(reducekit._loss, "_FUSED_PROBABILITY_TARGETS", request.param == "fused")
    return request.param


@pytest.fixture
def fused_probabilities(monkeypatch):
    monkeypatch.setattr(reducekit._loss, "_FUSED_PROBABILITY_TARGETS", True)


def _prob_inputs(shape, dtype, seed=0, target_dtype=None):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (3 * torch.randn(shape, device=DEV, generator=g)).to(dtype)
    class_dim = 0 if len(shape) == 1 else 1
    p = torch.softmax(2 * torch.randn(shape, device=DEV, generator=g), class_dim).to(target_dtype or dtype)
    w = torch.rand(shape[class_dim], device=DEV, generator=g) + 0.5
    return x, p, w


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("shape", list(SHAPES), ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_probability_targets_match_torch(dtype, shape, reduction, weighted, label_smoothing, probability_path):
    x, p, w = _prob_inputs(SHAPES[shape], dtype, seed=15)
    w = w.to(dtype) if weighted else None
    got = reducekit.cross_entropy(x, p, w, reduction=reduction, label_smoothing=label_smoothing)
    want = F.cross_entropy(x.double(), p.double(), None if w is None else w.double(), reduction=reduction,
                           label_smoothing=label_smoothing)
    assert got.dtype == dtype and got.shape == want.shape
    _close(got, want, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", ["NC", "NCHW"], ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_probability_targets_16bit_against_float64(dtype, shape, reduction, probability_path):
    x, p, w = _prob_inputs(SHAPES[shape], dtype, seed=16)
    w = w.to(dtype)  # a float32 weight would promote the result to float32, as torch
    for kwargs in ({}, {"weight": w, "label_smoothing": 0.1}):
        got = reducekit.cross_entropy(x, p, reduction=reduction, **kwargs)
        want = F.cross_entropy(x.double(), p.double(), reduction=reduction,
                               **{k: v.double() if torch.is_tensor(v) else v for k, v in kwargs.items()})
        assert got.dtype == dtype
        _close(got, want, dtype)


@pytest.mark.parametrize("shape", [(4, 7), (6,), (2, 5, 3, 2)], ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_probability_targets_gradcheck(shape, reduction, probability_path):
    x, p, w = _prob_inputs(shape, torch.float64, seed=17)
    x.requires_grad_()
    p.requires_grad_()
    w = w.double()
    assert torch.autograd.gradcheck(
        lambda x, p: reducekit.cross_entropy(x, p, w, reduction=reduction, label_smoothing=0.1), (x, p))
    assert torch.autograd.gradcheck(
        lambda x: reducekit.cross_entropy(x, p.detach(), reduction=reduction, lse_square_scale=1e-2, softcap=3.0),
        (x,))


@pytest.mark.parametrize("shape", [(24, 4099), (3, 11, 4, 5)], ids=str)
def test_probability_targets_grads_match_torch(shape, probability_path):
    x, p, w = _prob_inputs(shape, torch.float32, seed=18)
    a, pa = x.clone().requires_grad_(), p.clone().requires_grad_()
    b, pb = x.double().requires_grad_(), p.double().requires_grad_()
    reducekit.cross_entropy(a, pa, w, label_smoothing=0.1).backward()
    F.cross_entropy(b, pb, w.double(), label_smoothing=0.1).backward()
    _close(a.grad, b.grad, torch.float32)
    _close(pa.grad, pb.grad, torch.float32)
    assert a.grad.abs().max() > 0 and pa.grad.abs().max() > 0


def test_probability_targets_z_loss_and_softcap(probability_path):
    x, p, _ = _prob_inputs((16, 2000), torch.float32, seed=19)
    cap, s = 20.0, 1e-3
    a = x.clone().requires_grad_()
    b = x.double().requires_grad_()
    got = reducekit.cross_entropy(a, p, reduction="none", lse_square_scale=s, softcap=cap)
    z = cap * torch.tanh(b / cap)
    lse = torch.logsumexp(z, -1)
    want = F.cross_entropy(z, p.double(), reduction="none") + s * lse * lse
    _close(got, want, torch.float32)
    got.sum().backward()
    want.sum().backward()
    _close(a.grad, b.grad, torch.float32)


def test_probability_one_hot_targets_equal_class_indices(probability_path):
    x, t = _inputs(20, 300, torch.float32, seed=20, ignore=False)
    w = torch.rand(300, device=DEV) + 0.5
    one_hot = F.one_hot(t, 300).float()
    for reduction in ("none", "sum"):
        _close(reducekit.cross_entropy(x, one_hot, w, reduction=reduction, label_smoothing=0.1),
               reducekit.cross_entropy(x, t, w, reduction=reduction, label_smoothing=0.1).double(), torch.float32)
    # 'mean' differs by design (torch): probability targets divide by N, class indices by sum w[t]
    got = reducekit.cross_entropy(x, one_hot, w)
    _close(got, reducekit.cross_entropy(x, t, w, reduction="sum") / 20, torch.float32)


def test_probability_targets_dtype_promotion_and_ignore_index():
    x, p, w = _prob_inputs((8, 30), torch.bfloat16, seed=21, target_dtype=torch.float32)
    got = reducekit.cross_entropy(x, p)  # torch promotes bf16 logits with float32 targets to float32
    assert got.dtype == torch.float32
    _close(got, F.cross_entropy(x.double(), p.double()), torch.bfloat16)
    x32, p64, _ = _prob_inputs((8, 30), torch.float32, seed=21, target_dtype=torch.float64)
    assert reducekit.cross_entropy(x32, p64).dtype == torch.float64
    assert reducekit.cross_entropy(x32, p64.float(), w.double()).dtype == torch.float64
    # a negative ignore_index is ignored, as torch; one >= 0 is refused, as torch
    assert torch.equal(reducekit.cross_entropy(x32, p64.float(), ignore_index=-1),
                       reducekit.cross_entropy(x32, p64.float()))
    with pytest.raises(ValueError, match="ignore_index"):
        reducekit.cross_entropy(x32, p64.float(), ignore_index=0)


def test_probability_targets_empty_batch(probability_path):
    x, p, _ = _prob_inputs((0, 10), torch.float32)
    assert torch.isnan(reducekit.cross_entropy(x, p))
    assert torch.isnan(F.cross_entropy(x, p))
    assert reducekit.cross_entropy(x, p, reduction="sum").item() == 0
    assert reducekit.cross_entropy(x, p, reduction="none").shape == (0,)


def test_probability_targets_errors(probability_path):
    x, p, w = _prob_inputs((4, 10), torch.float32)
    with pytest.raises(ValueError, match="target"):  # the input's shape but not floating point
        reducekit.cross_entropy(x, p.long())
    with pytest.raises(RuntimeError, match="weight"):
        reducekit.cross_entropy(x, p, w[:9])
    with pytest.raises(RuntimeError, match="label_smoothing"):
        reducekit.cross_entropy(x, p, label_smoothing=1.5)
    with pytest.raises(RuntimeError, match="softcap"):
        reducekit.cross_entropy(x, p, softcap=-1.0)
    with pytest.raises(RuntimeError, match="lse_square_scale"):
        reducekit.cross_entropy(x, p, lse_square_scale=float("inf"))
    with pytest.raises(ValueError, match="reduction"):
        reducekit.cross_entropy(x, p, reduction="avg")


def test_nn_module_probability_targets(probability_path):
    x, p, w = _prob_inputs((2, 9, 3, 5), torch.float32, seed=22)
    for reduction in ("none", "sum", "mean"):
        ours = reducekit.nn.CrossEntropyLoss(weight=w, label_smoothing=0.05, reduction=reduction, check_targets=True)
        theirs = torch.nn.CrossEntropyLoss(weight=w.double(), label_smoothing=0.05, reduction=reduction)
        _close(ours(x, p), theirs(x.double(), p.double()), torch.float32)


def _off_granule(values, offset):
    """values in rows that start `offset` elements past the start of a wider tensor's rows."""
    rows, classes = values.shape
    wide = torch.empty(rows, classes + offset, device=values.device, dtype=values.dtype)
    out = wide[:, offset:]
    out.copy_(values)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("classes", [50257, 32000])
def test_probability_targets_vocabulary_rows_at_any_alignment(dtype, classes, fused_probabilities):
    """The fused kernels on vocabulary rows whose logits and targets start at different offsets
    in their granules: the loss and both gradients against torch in float64 on the same values."""
    x, p, w = _prob_inputs((6, classes), dtype, seed=23)
    x, p = _off_granule(x, 1).detach().requires_grad_(), _off_granule(p, 3).detach().requires_grad_()
    assert x.stride(0) == classes + 1 and p.stride(0) == classes + 3
    got = reducekit.cross_entropy(x, p, w, reduction="none", label_smoothing=0.1)
    xd, pd = x.detach().double().requires_grad_(), p.detach().double().requires_grad_()
    want = F.cross_entropy(xd, pd, w.double(), reduction="none", label_smoothing=0.1)
    _close(got, want, dtype)
    upstream = torch.linspace(-1, 2, 6, device=DEV)
    (got.float() * upstream).sum().backward()
    (want * upstream.double()).sum().backward()
    for name, ours, theirs in (("dlogits", x.grad, xd.grad), ("dtarget", p.grad, pd.grad)):
        assert_close(ours, theirs, dtype, theirs.abs().max(), f"{dtype} {classes} {name}")


def test_probability_targets_deterministic_and_batch_invariant(fused_probabilities):
    x, p, w = _prob_inputs((40, 4099), torch.bfloat16, seed=24)
    all_rows = reducekit.cross_entropy(x, p, w, reduction="none", label_smoothing=0.1)
    assert torch.equal(all_rows, reducekit.cross_entropy(x, p, w, reduction="none", label_smoothing=0.1))
    for r in (0, 17, 39):
        alone = reducekit.cross_entropy(x[r:r + 1], p[r:r + 1], w, reduction="none", label_smoothing=0.1)
        assert torch.equal(alone, all_rows[r:r + 1]), f"row {r}"


def test_probability_targets_nan_where_torch_gives_nan(fused_probabilities):
    """torch multiplies log-probabilities by the targets: a -inf logit under a zero target is NaN."""
    x, p, _ = _prob_inputs((3, 50), torch.float32, seed=25)
    x[1, 7] = float("-inf")
    p[1, 7] = 0.0
    got = reducekit.cross_entropy(x, p, reduction="none")
    want = F.cross_entropy(x, p, reduction="none")
    assert torch.equal(got.isnan(), want.isnan()) and bool(want[1].isnan()) and not bool(want[0].isnan())


def test_fused_probability_path_calls_the_fused_kernels(monkeypatch, fused_probabilities):
    called = []

    class Counting:
        def __getattr__(self, name):
            called.append(name)
            return getattr(torch.ops.reducekit, name)

    monkeypatch.setattr(reducekit._loss, "_ops", Counting())
    x, p, w = _prob_inputs((4, 10), torch.float32)
    reducekit.cross_entropy(x, p, w)
    assert "cross_entropy_probs_loss" in called  # 'mean': forward and reduction in one op
    called.clear()
    reducekit.cross_entropy(x, p, w, reduction="none")
    assert "cross_entropy_probs_forward" in called
    called.clear()
    reducekit.cross_entropy(x, p.double())  # a target of another dtype: composed
    assert not any(name.startswith("cross_entropy_probs") for name in called)


def test_probability_targets_opcheck():
    x, p, w = _prob_inputs((8, 100), torch.float32, seed=26)
    torch.library.opcheck(torch.ops.reducekit.cross_entropy_probs_forward.default,
                          (x.clone().requires_grad_(), p.clone().requires_grad_(), w, 0.1, 1e-4, 0.0))
    for reduction in ("mean", "sum"):
        torch.library.opcheck(torch.ops.reducekit.cross_entropy_probs_loss.default,
                              (x.clone().requires_grad_(), p.clone().requires_grad_(), w, reduction, 0.1, 1e-4, 0.0))
    xb, pb, _ = _prob_inputs((8, 100), torch.bfloat16, seed=26)
    out = torch.ops.reducekit.cross_entropy_probs_loss(xb, pb, w, "mean", 0.1, 1e-4, 0.0, torch.float32)[0]
    assert out.dtype == torch.float32 and out.dim() == 0
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.reducekit.cross_entropy_probs_loss(xb, pb, w, "mean", 0.1, 1e-4, 0.0, torch.float64)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_probability_reduced_loss_is_the_reduce_of_the_row_losses(reduction, fused_probabilities):
    """'mean' / 'sum' of class probabilities (one op, cross_entropy_probs_loss) against the
    per-row losses summed in float64; the gradients of logits and target against the per-row
    losses' backward with the loss's upstream gradient over the rows repeated a row, bit for bit."""
    x, p, w = _prob_inputs((300, 1003), torch.float32, seed=27)
    a, pa = x.clone().requires_grad_(), p.clone().requires_grad_()
    loss = reducekit.cross_entropy(a, pa, w, reduction=reduction, label_smoothing=0.1)
    loss.backward(torch.tensor(0.75, device=DEV))
    b, pb = x.clone().requires_grad_(), p.clone().requires_grad_()
    rows = reducekit.cross_entropy(b, pb, w, reduction="none", label_smoothing=0.1)
    want = rows.double().sum() / (300 if reduction == "mean" else 1)
    torch.testing.assert_close(loss.double(), want, rtol=1e-6, atol=0)
    denominator = torch.tensor(300.0 if reduction == "mean" else 1.0, device=DEV)
    rows.backward(torch.full_like(rows, 0.75) / denominator)
    assert torch.equal(a.grad, b.grad) and torch.equal(pa.grad, pb.grad)


# cross_entropy_with_grad: the loss and its gradient from one kernel, against cross_entropy and its
# autograd backward (the same kernels' bits apart: the fused kernel runs the forward's and the
# backward's row code in one CTA) and against torch in float64.
# The mean at 15 rows too, one ignored: 0.75 / 14 and 0.75 * (1 / 14) differ in float32, so the
# mean's upstream gradient must be divided as autograd divides it.
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction, rows", [("none", 19), ("sum", 19), ("mean", 19), ("mean", 15)])
@pytest.mark.parametrize("options", [{}, {"label_smoothing": 0.1, "weighted": True},
                                     {"lse_square_scale": 1e-3, "softcap": 20.0}], ids=["plain", "ls_w", "z_cap"])
def test_with_grad_equals_the_forward_and_backward(dtype, reduction, rows, options):
    options = dict(options)
    classes = 50257
    x, t = _inputs(rows, classes, dtype, seed=11)
    w = torch.rand(classes, device=DEV) + 0.5 if options.pop("weighted", False) else None
    # Per-row upstream gradients that the 16-bit loss's own dtype holds exactly: autograd rounds
    # the gradient reaching a 16-bit loss to its dtype.
    upstream = torch.randn(rows, device=DEV).to(dtype).float() if reduction == "none" else 0.75
    loss, grad = reducekit.cross_entropy_with_grad(x, t, w, reduction=reduction, grad_scale=upstream, **options)
    a = x.clone().requires_grad_()
    ref = reducekit.cross_entropy(a, t, w, reduction=reduction, **options)
    (ref * upstream).sum().backward()
    assert loss.dtype == dtype and grad.dtype == dtype and grad.shape == x.shape
    assert torch.equal(loss, ref.detach()), "the loss of the fused kernel"
    assert torch.equal(grad, a.grad), "the gradient of the fused kernel"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_with_grad_matches_torch(dtype):
    x, t = _inputs(24, 4099, dtype, seed=12)
    w = torch.rand(4099, device=DEV) + 0.5
    loss, grad = reducekit.cross_entropy_with_grad(x, t, w, label_smoothing=0.1)
    b = x.double().clone().requires_grad_()
    want = F.cross_entropy(b, t, w.double(), label_smoothing=0.1)
    want.backward()
    _close(loss, want, dtype)
    _close(grad, b.grad, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(37, 50257), (8, 50257, 50260), (5, 1000)], ids=str)
def test_with_grad_in_place(dtype, shape):
    rows, classes = shape[0], shape[1]
    stride = shape[2] if len(shape) == 3 else classes
    g = torch.Generator(device=DEV).manual_seed(13)
    base = (3 * torch.randn(rows, stride, device=DEV, generator=g)).to(dtype)
    x = base[:, :classes]  # rows at a stride (3 of them odd): written in place all the same
    t = torch.randint(0, classes, (rows,), device=DEV, generator=g)
    want_loss, want_grad = reducekit.cross_entropy_with_grad(x.clone(), t)
    tail = base[:, classes:].clone()
    loss, grad = reducekit.cross_entropy_with_grad(x, t, inplace=True)
    assert grad.data_ptr() == x.data_ptr(), "inplace=True returns the logits, now holding the gradient"
    assert torch.equal(loss, want_loss)
    assert torch.equal(x, want_grad)
    assert torch.equal(base[:, classes:], tail), "nothing past the rows was written"


def test_with_grad_bad_targets_and_errors():
    x, t = _inputs(6, 300, torch.float32, seed=14, ignore=False)
    t[2] = 300  # out of range: its row's loss and gradient NaN, the others exact
    loss, grad = reducekit.cross_entropy_with_grad(x, t, reduction="none")
    assert loss[2].isnan() and grad[2].isnan().all()
    keep = torch.tensor([0, 1, 3, 4, 5], device=DEV)
    want, want_grad = reducekit.cross_entropy_with_grad(x[keep], t[keep], reduction="none")
    assert torch.equal(loss[keep], want) and torch.equal(grad[keep], want_grad)
    with pytest.raises(ValueError, match="reduction"):
        reducekit.cross_entropy_with_grad(x, t, reduction="avg")
    with pytest.raises(ValueError, match="input"):
        reducekit.cross_entropy_with_grad(x.view(2, 3, 300), t.view(2, 3))
    with pytest.raises(ValueError, match="target"):
        reducekit.cross_entropy_with_grad(x, t.to(torch.int32))
    with pytest.raises(RuntimeError, match="weight"):
        reducekit.cross_entropy_with_grad(x, t, torch.ones(299, device=DEV))


def test_with_grad_opcheck():
    x, t = _inputs(8, 100, torch.float32, seed=15)
    w = torch.rand(100, device=DEV)
    g = torch.rand(8, device=DEV)
    torch.library.opcheck(torch.ops.reducekit.cross_entropy_fused.default, (x, t, w, g, -100, 0.1, 1e-4, 0.0))
    torch.library.opcheck(torch.ops.reducekit.cross_entropy_fused_.default, (x.clone(), t, w, g, -100, 0.1, 1e-4, 0.0))
    for reduction in ("mean", "sum"):
        args = (t, w, -100, reduction, 0.1, 1e-4, 0.0, 0.75)
        torch.library.opcheck(torch.ops.reducekit.cross_entropy_step.default, (x, *args))
        torch.library.opcheck(torch.ops.reducekit.cross_entropy_step_.default, (x.clone(), *args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("classes", [32000, 50257, 128256, 4099])
def test_with_grad_one_call_equals_the_calls_apart(dtype, reduction, classes):
    """A number for grad_scale takes the one-call step (its kernels started behind one another), a
    one-element tensor the calls apart: the same bits, and the step's loss that of the reduce."""
    x, t = _inputs(19, classes, dtype, seed=16)
    w = torch.rand(classes, device=DEV) + 0.5
    loss, grad = reducekit.cross_entropy_with_grad(x, t, w, reduction=reduction, grad_scale=0.75)
    want_loss, want_grad = reducekit.cross_entropy_with_grad(x, t, w, reduction=reduction,
                                                             grad_scale=torch.tensor(0.75, device=DEV))
    assert torch.equal(loss, want_loss) and torch.equal(grad, want_grad)
    with pytest.raises(RuntimeError, match="reduction"):
        torch.ops.reducekit.cross_entropy_step(x, t, w, -100, "none", 0.0, 0.0, 0.0, 1.0)


# ----------------------------------------------------------------------------- sizes: 2^20 classes, 2^31 logits

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rows", [3, 150])
def test_vocabulary_past_2_20(dtype, rows):
    """Rows of 2^20 + 3 classes (odd: every row but the first off its granules), split over CTAs
    at 3 rows and on the row loop at 150: the loss and its gradient against torch in float64."""
    classes = 2**20 + 3
    x, t = _inputs(rows, classes, dtype, seed=31)
    a = x.clone().requires_grad_()
    loss = reducekit.cross_entropy(a, t, reduction="sum")
    loss.backward()
    b = x.double().requires_grad_()
    want = F.cross_entropy(b, t, reduction="sum")
    want.backward()
    _close(loss, want, dtype)
    assert_grad_close(a.grad, b.grad, x, t, None, torch.ones((), device=DEV, dtype=torch.float64), "sum", 0.0,
                      f"{rows}x{classes}")


@pytest.mark.large
@pytest.mark.parametrize("shape", [(2**31 // 50257 + 2, 50257), (2**20 + 3, 2049)], ids=str)
def test_more_than_2_31_logits(shape, fused_probabilities):
    """More than 2^31 bfloat16 logits (the last rows start past element 2^31; the second shape has
    more than 2^20 rows): the row losses, the autograd gradient and the in-place fused gradient of
    picked rows against torch in float64 on those rows alone (a row's values depend on no other
    row); at 50257 classes class-probability targets too."""
    rows, classes = shape
    numel = rows * classes
    need = 4 * numel * 2  # logits, gradient, targets and room, in bfloat16
    if torch.cuda.mem_get_info()[0] < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory")
    g = torch.Generator(device=DEV).manual_seed(32)
    x = torch.randn(rows, classes, device=DEV, dtype=torch.bfloat16, generator=g)
    t = torch.randint(0, classes, (rows,), device=DEV, generator=g)
    t[rows - 2] = -100
    picked = torch.tensor([0, 1, rows // 2, rows - 2, rows - 1], device=DEV)

    def against_torch(target):
        """The picked rows' losses and autograd gradient against torch's in float64 on those rows
        alone; torch's (losses, gradient)."""
        xp = x[picked].double().requires_grad_()
        tp = target[picked].double() if target.is_floating_point() else target[picked]
        want = F.cross_entropy(xp, tp, reduction="none")
        want.sum().backward()
        a = x.detach().requires_grad_()
        loss = reducekit.cross_entropy(a, target, reduction="none")
        _close(loss[picked], want, torch.bfloat16)
        loss.sum().backward()
        _close(a.grad[picked], xp.grad, torch.bfloat16)
        return want.detach(), xp.grad

    want, want_grad = against_torch(t)
    if classes == 50257:
        against_torch(torch.rand(rows, classes, device=DEV, dtype=torch.bfloat16, generator=g).div_(classes))
    loss, grad = reducekit.cross_entropy_with_grad(x, t, reduction="none", inplace=True)
    assert grad.data_ptr() == x.data_ptr()
    _close(loss[picked], want, torch.bfloat16)
    _close(grad[picked], want_grad, torch.bfloat16)
