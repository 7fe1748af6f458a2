# SPDX-License-Identifier: Apache-2.0
"""reducekit.linear_cross_entropy against cross_entropy(F.linear(hidden, weight, bias), target)
computed by torch in float64 with autograd: dtypes, reductions, bias, class weights, ignore_index,
label smoothing, the z-loss and soft-cap, chunk sizes (one row, uneven, one chunk), rows of any
leading shape, all rows ignored, gradcheck, opcheck, torch.compile, the nn module, bad inputs, and
the peak memory of a step against its budget (1/8 of the full logits)."""
import math

import pytest
import torch
import torch.nn.functional as F

import reducekit
from reducekit._linear_loss import plan_chunk_rows

DEV = "cuda"
# Largest error relative to the largest magnitude of the float64 result: the GEMMs round their
# outputs (logits, dlogits) to the input dtype, and dweight is rounded once a chunk.
REL = {torch.float32: 2e-5, torch.float64: 1e-11, torch.bfloat16: 3e-2, torch.float16: 4e-3}


pytestmark = pytest.mark.usefixtures("exact_float32_gemms")  # conftest.py: no TF32 in float32 GEMMs


def _problem(rows, features, classes, dtype, bias=False, seed=0, ignore_index=-100):
    g = torch.Generator(device=DEV).manual_seed(seed)
    hidden = torch.randn(rows, features, device=DEV, generator=g).to(dtype)
    weight = (torch.randn(classes, features, device=DEV, generator=g) / math.sqrt(features)).to(dtype)
    b = torch.randn(classes, device=DEV, generator=g).to(dtype) if bias else None
    target = torch.randint(0, classes, (rows,), device=DEV, generator=g)
    if rows > 2:
        target[1] = ignore_index
    return hidden, weight, b, target


def _leaves(*tensors):
    return [None if t is None else t.detach().clone().requires_grad_() for t in tensors]


def _reference_loss(hidden, weight, bias, target, class_weight=None, reduction="mean", label_smoothing=0.0,
                    lse_square_scale=0.0, softcap=0.0, ignore_index=-100):
    """The float64 loss the kernels approximate: torch's cross_entropy of the (soft-capped) logits,
    plus the z-loss of each kept row."""
    logits = F.linear(hidden, weight, bias)
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    w = None if class_weight is None else class_weight.double()
    loss = F.cross_entropy(logits, target, w, ignore_index=ignore_index, reduction="none",
                           label_smoothing=label_smoothing)
    if lse_square_scale:
        kept = target != ignore_index
        loss = loss + lse_square_scale * torch.logsumexp(logits, -1) ** 2 * kept
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    kept = (target != ignore_index).double()
    if w is not None:
        kept = kept * w[target.clamp(0, w.numel() - 1)]
    return loss.sum() / kept.sum()


def _assert_close(got, want, dtype, what):
    assert got is not None, f"{what}: no gradient"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    scale = want.double().abs().max().clamp_min(1e-30)
    error = (got.double() - want.double()).abs().max() / scale
    assert error <= REL[dtype], f"{what}: largest error {error:.3g} of the largest value, tolerance {REL[dtype]:.1g}"


def _check_step(dtype, rows=37, features=64, classes=1001, bias=False, reduction="mean", chunk_rows=None,
                upstream=None, **options):
    hidden, weight, b, target = _problem(rows, features, classes, dtype, bias,
                                         ignore_index=options.get("ignore_index", -100))
    h, w, bb = _leaves(hidden, weight, b)
    loss = reducekit.linear_cross_entropy(h, w, target, bb, reduction=reduction, chunk_rows=chunk_rows, **options)
    h64, w64, b64 = _leaves(hidden.double(), weight.double(), None if b is None else b.double())
    want = _reference_loss(h64, w64, b64, target, reduction=reduction, **options)
    assert loss.dtype == dtype and loss.shape == want.shape
    _assert_close(loss, want, dtype, "loss")
    grad = torch.randn(want.shape, device=DEV, dtype=torch.float64) if upstream is None else upstream
    loss.backward(grad.to(loss.dtype))
    want.backward(grad.to(loss.dtype).double())
    _assert_close(h.grad, h64.grad, dtype, "dhidden")
    _assert_close(w.grad, w64.grad, dtype, "dweight")
    if bias:
        _assert_close(bb.grad, b64.grad, dtype, "dbias")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_linear_then_cross_entropy(dtype, reduction, bias):
    _check_step(dtype, bias=bias, reduction=reduction, chunk_rows=8)  # 5 chunks, the last one short


@pytest.mark.parametrize("chunk_rows", [1, 5, 36, 37, 1000, None])
def test_every_chunk_size(chunk_rows):
    _check_step(torch.float32, bias=True, chunk_rows=chunk_rows)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_options(reduction):
    classes = 517
    class_weight = torch.rand(classes, device=DEV) + 0.5
    _check_step(torch.float32, classes=classes, bias=True, reduction=reduction, chunk_rows=10,
                class_weight=class_weight, label_smoothing=0.1, lse_square_scale=1e-3, softcap=5.0)
    _check_step(torch.bfloat16, classes=classes, reduction=reduction, chunk_rows=16, class_weight=class_weight,
                ignore_index=3, label_smoothing=0.2)


def test_chunks_agree():
    hidden, weight, b, target = _problem(64, 32, 300, torch.float32, bias=True)
    losses = [reducekit.linear_cross_entropy(hidden, weight, target, b, reduction="none", chunk_rows=c)
              for c in (1, 7, 64)]
    for other in losses[1:]:
        torch.testing.assert_close(other, losses[0], rtol=1e-5, atol=1e-5)  # the GEMMs' rounding


def test_leading_dims():
    hidden, weight, _, target = _problem(24, 16, 50, torch.float32)
    h3, t3 = hidden.reshape(2, 3, 4, 16), target.reshape(2, 3, 4)
    got = reducekit.linear_cross_entropy(h3, weight, t3, reduction="none", chunk_rows=5)
    assert got.shape == (2, 3, 4)
    want = reducekit.linear_cross_entropy(hidden, weight, target, reduction="none")
    torch.testing.assert_close(got.reshape(-1), want)


def test_all_rows_ignored():
    hidden, weight, _, target = _problem(6, 8, 20, torch.float32)
    target.fill_(-100)
    h, w = _leaves(hidden, weight)
    loss = reducekit.linear_cross_entropy(h, w, target)
    assert loss.isnan()  # 0 / 0, as torch
    loss.backward()
    assert torch.equal(h.grad, torch.zeros_like(h)) and torch.equal(w.grad, torch.zeros_like(w))


def test_no_rows():
    hidden, weight, _, target = _problem(0, 8, 20, torch.float32)
    h, w = _leaves(hidden, weight)
    loss = reducekit.linear_cross_entropy(h, w, target, reduction="sum")
    loss.backward()
    assert loss.item() == 0.0 and h.grad.shape == (0, 8) and torch.equal(w.grad, torch.zeros_like(w))


def test_frozen_weight_and_no_grad():
    hidden, weight, b, target = _problem(20, 16, 40, torch.float32, bias=True)
    h = hidden.clone().requires_grad_()
    loss = reducekit.linear_cross_entropy(h, weight, target, b)
    loss.backward()
    h64 = hidden.double().requires_grad_()
    _reference_loss(h64, weight.double(), b.double(), target).backward()
    _assert_close(h.grad, h64.grad, torch.float32, "dhidden")
    with torch.no_grad():
        again = reducekit.linear_cross_entropy(h, weight, target, b)
    torch.testing.assert_close(again, loss.detach())


def test_second_backward_is_refused():
    hidden, weight, _, target = _problem(8, 8, 16, torch.float32)
    h = hidden.requires_grad_()
    loss = reducekit.linear_cross_entropy(h, weight, target)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


def test_gradcheck_rows():
    hidden, weight, b, target = _problem(6, 5, 7, torch.float64, bias=True)
    class_weight = torch.rand(7, device=DEV, dtype=torch.float64) + 0.5

    def rows_loss(h, w, bb):
        return reducekit.linear_cross_entropy(h, w, target, bb, class_weight, reduction="none", chunk_rows=4,
                                              label_smoothing=0.1, lse_square_scale=0.01, softcap=2.0)

    assert torch.autograd.gradcheck(rows_loss, _leaves(hidden, weight, b))


def test_opcheck():
    hidden, weight, b, target = _problem(12, 8, 30, torch.float32, bias=True)
    g = torch.full((12,), 0.25, device=DEV)
    torch.library.opcheck(torch.ops.reducekit.linear_cross_entropy_forward.default,
                          (hidden, weight, b, target, None, -100, 0.1, 0.0, 0.0, 5))
    torch.library.opcheck(torch.ops.reducekit.linear_cross_entropy_fused.default,
                          (hidden, weight, b, target, None, g, -100, 0.0, 1e-3, 0.0, 5, True, True, True))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compile_fullgraph(reduction):
    torch._dynamo.reset()
    hidden, weight, b, target = _problem(40, 32, 100, torch.float32, bias=True)

    def loss_fn(h, w, bb):
        return reducekit.linear_cross_entropy(h, w, target, bb, reduction=reduction, chunk_rows=16).sum()

    results = []
    for fn in (torch.compile(loss_fn, fullgraph=True), loss_fn):
        leaves = _leaves(hidden, weight, b)
        loss = fn(*leaves)
        loss.backward()
        results.append([loss] + [leaf.grad for leaf in leaves])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_module_shares_the_linear():
    head = torch.nn.Linear(16, 90, bias=True, device=DEV)
    loss_fn = reducekit.nn.LinearCrossEntropyLoss.from_linear(head, label_smoothing=0.05, chunk_rows=7)
    assert loss_fn.weight is head.weight and loss_fn.bias is head.bias
    assert set(reducekit.nn.LinearCrossEntropyLoss(16, 90).state_dict()) == set(head.state_dict())
    hidden, _, _, target = _problem(30, 16, 90, torch.float32)
    loss = loss_fn(hidden, target)
    want = F.cross_entropy(head(hidden), target, label_smoothing=0.05)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    loss.backward()
    assert head.weight.grad is not None and head.bias.grad is not None


@pytest.mark.parametrize("make, names", [
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w[:, :5], t), "weight"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w.double(), t), "weight"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w[:0], t), "weight"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w, t[:3]), "target"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w, t.int()), "target"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w, t, torch.zeros(3, device=DEV)), "bias"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w, t, class_weight=torch.ones(3, device=DEV)), "class_weight"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w, t, reduction="avg"), "reduction"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h, w, t, chunk_rows=0), "chunk_rows"),
    (lambda h, w, t: reducekit.linear_cross_entropy(h.int(), w, t), "hidden"),
])
def test_bad_inputs(make, names):
    hidden, weight, _, target = _problem(6, 8, 20, torch.float32)
    with pytest.raises(ValueError, match=names):
        make(hidden, weight, target)


def test_out_of_range_target():
    hidden, weight, _, target = _problem(6, 8, 20, torch.float32)
    target[2] = 20
    rows = reducekit.linear_cross_entropy(hidden, weight, target, reduction="none")
    assert rows[2].isnan() and rows[[0, 3, 4, 5]].isfinite().all()
    with pytest.raises(ValueError, match="target: 20 at flattened index 2"):
        reducekit.linear_cross_entropy(hidden, weight, target, check_targets=True)


def test_plan_chunk_rows():
    assert plan_chunk_rows(8192, 128256, 2) * 128256 * 2 <= 8192 * 128256 * 2 // 8
    assert plan_chunk_rows(100, 1000, 4) == 100  # a small problem stays whole
    assert plan_chunk_rows(10, 10, 4, chunk_rows=3) == 3
    assert plan_chunk_rows(10, 10, 4, chunk_rows=30) == 10
    rows = plan_chunk_rows(100000, 128256, 2)
    assert math.ceil(100000 / rows) * rows - 100000 < math.ceil(100000 / rows)  # chunks even to a row


def test_peak_memory_within_an_eighth_of_the_logits():
    rows, features, classes, dtype = 16384, 256, 32000, torch.bfloat16
    hidden, weight, _, target = _problem(rows, features, classes, dtype)
    h, w = _leaves(hidden, weight)

    def step():
        h.grad = w.grad = None
        reducekit.linear_cross_entropy(h, w, target).backward()

    step()  # cuBLAS's and reducekit's workspaces come from the caching allocator once
    h.grad = w.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    gradients = h.grad.nbytes + w.grad.nbytes
    extra = torch.cuda.max_memory_allocated() - before - gradients
    logits = rows * classes * hidden.element_size()
    assert extra <= logits // 8, f"peak extra {extra / 2**20:.1f} MiB, budget {logits / 8 / 2**20:.1f} MiB"
