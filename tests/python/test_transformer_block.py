# SPDX-License-Identifier: Apache-2.0
"""reducekit.patch on a small pre-norm transformer decoder written in plain torch: two blocks of
norm -> causal multi-head self-attention (softmax through a torch.nn.Softmax(dim=-1) module) ->
residual add -> norm -> MLP (Linear, GELU, Linear) -> residual add, then a final norm, an lm_head
and torch.nn.CrossEntropyLoss on targets some of which are ignore_index. The norms are
torch.nn.RMSNorm in one variant and torch.nn.LayerNorm in the other.

Checked: patch() swaps every norm, every Softmax and the loss, and leaves nothing alone; the
loss, the logits, every parameter's gradient and the input's gradient of the patched model match
the unpatched model's, eagerly in float32 and bfloat16; the patched model compiled with
torch.compile(fullgraph=True), in train and eval mode, matches the patched model run eagerly and
the unpatched model, in float32 and bfloat16. A variant keeps the residual stream in float32
through reducekit.nn.AddRMSNorm / AddLayerNorm (residual_in_float32=True) and matches the same
model written in torch, in bfloat16.

The oracle is the unpatched model run in float64 (a deep copy converted with .double(), with
the input converted likewise). In float32, the patched and the unpatched model must both match
it within tolerance.assert_close, with each tensor's largest magnitude as the scale (1e-5 of
it), as test_patch.py does: the unpatched model passing shows the bound fits torch's own float32
error. In bfloat16 (weights and input; the oracle is a float64 copy of the bfloat16 weights and
input, so that it measures the arithmetic, not the rounding of the weights), every tensor's
largest error must be at most BF16_REL of its largest magnitude: the patched model against the
oracle, the unpatched model against the oracle (which shows the bound fits torch's own bfloat16
error), and the patched model against the unpatched one. The compiled patched model is held to the
same checks as the eager one in its dtype (in float32 against the unpatched model through the
oracle: two float32 results each within the bound of float64 may be twice that apart).
"""
import copy
import functools

import pytest
import torch
from torch import nn

import reducekit
from tolerance import assert_close

DEV = "cuda"
BATCH, SEQ, HIDDEN, HEADS, VOCAB, LAYERS = 4, 16, 64, 4, 257, 2
HEAD_DIM = HIDDEN // HEADS
NORMS = {"rms_norm": nn.RMSNorm, "layer_norm": nn.LayerNorm}
REPLACEMENTS = {nn.RMSNorm: reducekit.nn.RMSNorm, nn.LayerNorm: reducekit.nn.LayerNorm,
                nn.Softmax: reducekit.nn.Softmax, nn.CrossEntropyLoss: reducekit.nn.CrossEntropyLoss}
# bfloat16: each tensor's largest error, as a share of its largest magnitude. Every op rounds to
# bfloat16 (2**-8 of the value at worst), through two blocks forward and backward; the norms'
# weight and bias gradients, sums over every position of gradients already that far off, err
# most. On the CPU over 40 seeds: torch's own bfloat16 model up to 2.5% off float64, a stand-in
# for reducekit (float32 inside each op, one rounding) up to 1.8%, the two apart up to 2.7%.
BF16_REL = 8 * torch.finfo(torch.bfloat16).eps  # 6.25%


pytestmark = pytest.mark.usefixtures("exact_float32_gemms")  # conftest.py: no TF32 in float32 GEMMs


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        # Without biases (as Llama): the softmax ignores a shift of a whole row of scores, so a key
        # bias would get a zero gradient, made of rounding noise alone.
        self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(4))
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        b, s, _ = x.shape

        def heads(t):  # [b, s, hidden] -> [b, heads, s, head_dim]
            return t.view(b, s, HEADS, HEAD_DIM).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = (q @ k.transpose(-2, -1)) * HEAD_DIM ** -0.5  # a power of two: no rounding
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = self.softmax(scores.masked_fill(future, float("-inf")))
        return self.o((probs @ v).transpose(1, 2).reshape(b, s, HIDDEN))


class Block(nn.Module):
    def __init__(self, norm):
        super().__init__()
        # eps given: RMSNorm's eps=None is the dtype's own epsilon (2**-7 in bfloat16), which would
        # make the float64 oracle compute another function
        self.norm1, self.attn, self.norm2 = norm(HIDDEN, eps=1e-5), Attention(), norm(HIDDEN, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, norm, block=Block):
        super().__init__()
        self.blocks = nn.ModuleList(block(norm) for _ in range(LAYERS))
        self.norm = norm(HIDDEN, eps=1e-5)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.loss = nn.CrossEntropyLoss()
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:  # norm weights near one, their biases near zero
                    p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
                elif name.endswith("weight"):  # activations keep their size from layer to layer
                    p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
                else:
                    p.copy_(0.2 * torch.randn_like(p))

    def forward(self, x, target):
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm(x))
        return {"loss": self.loss(logits.view(-1, VOCAB), target.view(-1)), "logits": logits}


def make_model(norm_kind, dtype=torch.float32):
    return Decoder(NORMS[norm_kind]).to(DEV, dtype)


def patch_and_check(model):
    """reducekit.patch(model), asserting that it swapped every norm, Softmax and the loss."""
    kinds = tuple(REPLACEMENTS)
    expected = {name: type(m) for name, m in model.named_modules() if type(m) in kinds}
    assert len(expected) == 3 * LAYERS + 2, sorted(expected)
    report = reducekit.patch(model)
    assert not report.skipped, str(report)
    assert {r.name: r.old for r in report.replaced} == expected, str(report)
    modules = dict(model.named_modules())
    for r in report:
        assert r.new is REPLACEMENTS[r.old] and type(modules[r.name]) is r.new, f"{r.name}: {r.new}"


def inputs(dtype=torch.float32):
    x = (torch.randn(BATCH, SEQ, HIDDEN, device=DEV) + 0.5).to(dtype)  # the residual stream entering
    target = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEV)
    target[0, :5] = -100  # ignore_index: a run of positions, and one alone
    target[2, 9] = -100
    return x, target


def run(model, x, target, call=None):
    """Loss and logits and, after the loss's backward, the gradients of every parameter and of x
    (model names the parameters; call, model itself or a compiled form of it, runs the forward)."""
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = (model if call is None else call)(x, target)
    out["loss"].backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    grads["input"] = x.grad
    return {**{k: v.detach() for k, v in out.items()}, **{f"d {k}": g for k, g in grads.items()}}


def assert_float32_close(got, want, what):
    """Every tensor of got (float32) within tolerance.assert_close of want's (float64, or float32
    converted), with want's largest magnitude as the scale."""
    assert got.keys() == want.keys()
    for name, w in want.items():
        assert got[name] is not None and w is not None, f"{what} {name}: missing"
        assert_close(got[name], w.double(), torch.float32, w.double().abs().amax(), f"{what} {name}")


def assert_bf16_close(got, want, what):
    """Every tensor of got (bfloat16) off want's by at most BF16_REL of want's largest magnitude."""
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        assert g is not None and w is not None, f"{what} {name}: missing"
        assert g.dtype == torch.bfloat16 and g.shape == w.shape, f"{what} {name}: {g.dtype} {tuple(g.shape)}"
        assert bool(g.isfinite().all()), f"{what} {name}: not finite"
        w = w.double()
        scale = w.abs().amax().item()
        err = (g.double() - w).abs().amax().item()
        assert err <= BF16_REL * scale, f"{what} {name}: largest error {err:.3g}, {err / scale:.2%} of the " \
                                        f"largest magnitude {scale:.3g} (allowed {BF16_REL:.2%})"


@pytest.mark.parametrize("norm_kind", sorted(NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_patched_block_matches_the_unpatched_one(norm_kind, dtype):
    model = make_model(norm_kind, dtype)
    oracle = copy.deepcopy(model).double()
    unpatched = copy.deepcopy(model)
    patch_and_check(model)
    x, target = inputs(dtype)
    want = run(oracle, x.double(), target)
    got = run(model, x, target)
    torch_result = run(unpatched, x, target)
    if dtype == torch.float32:
        assert_float32_close(torch_result, want, "torch float32")  # the tolerance fits torch's own error
        assert_float32_close(got, want, "patched float32")
    else:
        assert_bf16_close(torch_result, want, "torch bfloat16")  # the bound fits torch's own error
        assert_bf16_close(got, want, "patched bfloat16")
        assert_bf16_close(got, torch_result, "patched bfloat16 against torch bfloat16")


@pytest.mark.parametrize("norm_kind", sorted(NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_patched_block_under_torch_compile(norm_kind, dtype):
    """The compiled patched model against the patched model run eagerly, and against the unpatched
    model as test_patched_block_matches_the_unpatched_one holds the eager one: in float32 both
    within tolerance of the float64 oracle, in bfloat16 within BF16_REL of the oracle and of the
    unpatched model's result."""
    torch._dynamo.reset()
    model = make_model(norm_kind, dtype)
    oracle = copy.deepcopy(model).double()
    unpatched = copy.deepcopy(model)
    patch_and_check(model)
    compiled = torch.compile(model, fullgraph=True)
    x, target = inputs(dtype)
    for mode in ("train", "eval"):
        for m in (model, unpatched, oracle):
            getattr(m, mode)()
        eager = run(model, x, target)
        got = run(model, x, target, compiled)
        want = run(oracle, x.double(), target)
        torch_result = run(unpatched, x, target)
        if dtype == torch.float32:
            assert_float32_close(got, eager, f"compiled ({mode})")
            assert_float32_close(torch_result, want, f"torch float32 ({mode})")  # the tolerance fits torch's own error
            assert_float32_close(got, want, f"compiled float32 ({mode})")
        else:
            assert_bf16_close(got, eager, f"compiled bfloat16 against eager ({mode})")
            assert_bf16_close(torch_result, want, f"torch bfloat16 ({mode})")  # the bound fits torch's own error
            assert_bf16_close(got, want, f"compiled bfloat16 ({mode})")
            assert_bf16_close(got, torch_result, f"compiled bfloat16 against torch bfloat16 ({mode})")


# ----------------------------------------------------------------------------- a float32 residual stream
# The pre-norm pattern as fused-norm libraries write it: each block takes (h, residual) and its
# norms return (norm(h + residual), h + residual), the residual stream kept in float32 while the
# weights and activations are bfloat16. reducekit's AddRMSNorm / AddLayerNorm with
# residual_in_float32=True against the same model whose norms do it in torch (the sum in float32,
# the norm of it in float32 rounded once), and both against a float64 copy.

def _stream_dtype(h):
    return torch.promote_types(h.dtype, torch.float32)


class TorchAddRMSNorm(nn.RMSNorm):
    def forward(self, h, residual=None):
        s = h.to(_stream_dtype(h)) + (0 if residual is None else residual)
        return nn.functional.rms_norm(s, self.normalized_shape, self.weight.to(s.dtype), self.eps).to(h.dtype), s


class TorchAddLayerNorm(nn.LayerNorm):
    def forward(self, h, residual=None):
        s = h.to(_stream_dtype(h)) + (0 if residual is None else residual)
        y = nn.functional.layer_norm(s, self.normalized_shape, self.weight.to(s.dtype), self.bias.to(s.dtype), self.eps)
        return y.to(h.dtype), s


class StreamBlock(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.norm1, self.attn, self.norm2 = norm(HIDDEN, eps=1e-5), Attention(), norm(HIDDEN, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, h, residual):
        h, residual = self.norm1(h, residual)
        h, residual = self.norm2(self.attn(h), residual)
        return self.mlp(h), residual


class StreamDecoder(Decoder):
    """Decoder's parameters and initialization, the blocks and norms taking (h, residual)."""

    def __init__(self, norm):
        super().__init__(norm, StreamBlock)

    def forward(self, x, target):
        h, residual = x, None
        for block in self.blocks:
            h, residual = block(h, residual)
        h, _ = self.norm(h, residual)
        logits = self.lm_head(h)
        return {"loss": self.loss(logits.view(-1, VOCAB), target.view(-1)), "logits": logits}


STREAM_NORMS = {
    "rms_norm": (functools.partial(reducekit.nn.AddRMSNorm, residual_in_float32=True), TorchAddRMSNorm),
    "layer_norm": (functools.partial(reducekit.nn.AddLayerNorm, residual_in_float32=True), TorchAddLayerNorm),
}


@pytest.mark.parametrize("norm_kind", sorted(STREAM_NORMS))
def test_float32_residual_stream_matches_torch(norm_kind):
    ours, theirs = STREAM_NORMS[norm_kind]
    model = StreamDecoder(ours).to(DEV, torch.bfloat16)
    reference = StreamDecoder(theirs).to(DEV, torch.bfloat16)
    reference.load_state_dict(model.state_dict())
    oracle = copy.deepcopy(reference).double()
    x, target = inputs(torch.bfloat16)
    with torch.no_grad():
        h, residual = model.blocks[0](x, None)
        h, residual = model.blocks[1](h, residual)
    assert h.dtype == torch.bfloat16 and residual.dtype == torch.float32, (h.dtype, residual.dtype)
    want = run(oracle, x.double(), target)
    got = run(model, x, target)
    torch_result = run(reference, x, target)
    assert_bf16_close(torch_result, want, "torch, float32 stream")  # the bound fits torch's own error
    assert_bf16_close(got, want, "reducekit, float32 stream")
    assert_bf16_close(got, torch_result, "reducekit against torch, float32 stream")
