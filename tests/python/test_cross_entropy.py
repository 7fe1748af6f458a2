# SPDX-License-Identifier: Apache-2.0
"""reducekit.cross_entropy against torch.nn.functional.cross_entropy (computed in float64) and
the z-loss / soft-cap extras against their formulas: dtypes, reductions, class weights,
ignore_index, label smoothing, unbatched and [N, C, d] inputs, odd vocabularies, backward,
out-of-range targets, determinism, opcheck and the nn module."""
import pytest
import torch
import torch.nn.functional as F

import reducekit

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
    with pytest.raises(NotImplementedError):
        reducekit.cross_entropy(x, torch.softmax(x, -1))
