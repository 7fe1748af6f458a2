# SPDX-License-Identifier: Apache-2.0
"""reducekit.patch / unpatch on a model holding every kind of module they know, and the fused
residual modules (reducekit.nn.AddLayerNorm / AddRMSNorm).

The oracle is the unpatched model run in float64 (a deep copy converted with .double()); the
patched float32 model's outputs, running statistics and gradients must match it within
tolerance.assert_close with the output's largest magnitude as the scale (1e-5 of it: float32
math through a chain of norms), and the unpatched float32 model must too, which shows the
tolerance fits torch's own float32 error. transformers' RMSNorm classes are written out below
with their forwards' roundings (patch() recognises them by class name and defining module,
never by importing transformers); their patched forms must give the unpatched forms' dtype and,
in 16-bit, the same values but for rare one-unit differences where a float32 value lies next to
a rounding boundary. conftest.py skips this module, with the reason, where torch, a GPU or a
built reducekit is missing.
"""
import copy

import pytest
import torch

import reducekit
from tolerance import assert_close, ulp

DEV = "cuda"
N, C, BATCH = 48, 6, 16


# ----------------------------------------------------------------------------- transformers-style classes

class LlamaRMSNorm(torch.nn.Module):
    """Normalize in float32, round to the input's dtype, then scale (promoting to the weight's dtype)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        wide = hidden_states.to(torch.float32)
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)


class GemmaRMSNorm(torch.nn.Module):
    """Scale by 1 + weight, all in float32, one rounding to the input's dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        wide = x.float()
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).type_as(x)


class T5LayerNorm(torch.nn.Module):
    """Normalize in float32, round to a 16-bit weight's dtype, then scale."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        normed = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            normed = normed.to(self.weight.dtype)
        return self.weight * normed


for _cls, _module in ((LlamaRMSNorm, "llama"), (GemmaRMSNorm, "gemma"), (T5LayerNorm, "t5")):
    _cls.__module__ = f"transformers.models.{_module}.modeling_{_module}"


class OwnLlamaRMSNorm(LlamaRMSNorm):
    """transformers' name in another package: its forward cannot be vouched for, so it is left alone."""


OwnLlamaRMSNorm.__name__ = OwnLlamaRMSNorm.__qualname__ = "LlamaRMSNorm"
OwnLlamaRMSNorm.__module__ = "mypackage.layers"


class MyRMSNorm(LlamaRMSNorm):
    pass


MyRMSNorm.__module__ = "mypackage.layers"


class ScaledLayerNorm(torch.nn.LayerNorm):
    def forward(self, x):
        return 2 * super().forward(x)


HF_CLASSES = {"llama": LlamaRMSNorm, "gemma": GemmaRMSNorm, "t5": T5LayerNorm}


# ----------------------------------------------------------------------------- the model

class Everything(torch.nn.Module):
    """Every module kind patch() swaps, plus three it must leave alone, in one forward."""

    def __init__(self, with_left_alone=True):
        super().__init__()
        self.with_left_alone = with_left_alone  # False: only modules patch() swaps run
        nn = torch.nn
        self.ln = nn.LayerNorm(N)
        self.ln_no_bias = nn.LayerNorm(N, bias=False)
        self.ln_plain = nn.LayerNorm(N, elementwise_affine=False)
        self.rms = nn.RMSNorm(N)  # eps=None: the dtype's epsilon
        self.llama = LlamaRMSNorm(N)
        self.gemma = GemmaRMSNorm(N)
        self.t5 = T5LayerNorm(N)
        self.up = nn.Linear(N, C * 8)
        self.bn1 = nn.BatchNorm1d(C)
        self.bn2 = nn.BatchNorm2d(C, momentum=None)
        self.bn3 = nn.BatchNorm3d(C, affine=False)
        self.softmax = nn.Softmax(dim=-1)
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.loss = nn.CrossEntropyLoss(label_smoothing=0.1)
        # left alone
        self.implicit_dim = nn.Softmax()
        self.custom = MyRMSNorm(N)
        self.scaled = ScaledLayerNorm(N)
        self.foreign = OwnLlamaRMSNorm(N)
        with torch.no_grad():
            for name, p in self.named_parameters():
                # norm weights near one (Gemma's offsets near zero), the rest spread
                centre = 1.0 if name.endswith("weight") and p.dim() == 1 and not name.startswith("gemma") else 0.0
                p.copy_(centre + 0.5 * torch.randn_like(p))

    def forward(self, x, target):
        h = self.ln(x) + self.ln_no_bias(x) * self.ln_plain(x)
        h = self.rms(h) + self.llama(h) - self.gemma(h) + self.t5(h)
        if self.with_left_alone:
            h = h + self.custom(x) + self.scaled(x) + self.foreign(x)
        h = self.up(h)
        # Each batch norm groups the features into channels differently (blocks of 8, every C-th
        # feature, blocks of 8), so that none undoes the scaling of the one before it.
        b = h.shape[0]
        h = self.bn1(h.view(b, C, 8)).view(b, 2, 4, C)
        h = self.bn2(h.permute(0, 3, 1, 2))  # channels-last
        h = self.bn3(h.permute(0, 2, 3, 1).reshape(b, C, 2, 2, 2)).reshape(b, C * 8)
        p = self.softmax(h) + (self.implicit_dim(h) if self.with_left_alone else 0)
        logits = self.log_softmax(h) + p
        return {"loss": self.loss(logits, target), "h": h, "p": p, "logits": logits}


REPLACED = {
    "ln": reducekit.nn.LayerNorm, "ln_no_bias": reducekit.nn.LayerNorm, "ln_plain": reducekit.nn.LayerNorm,
    "rms": reducekit.nn.RMSNorm, "bn1": reducekit.nn.BatchNorm1d, "bn2": reducekit.nn.BatchNorm2d,
    "bn3": reducekit.nn.BatchNorm3d, "softmax": reducekit.nn.Softmax, "log_softmax": reducekit.nn.LogSoftmax,
    "loss": reducekit.nn.CrossEntropyLoss, "llama": LlamaRMSNorm, "gemma": GemmaRMSNorm, "t5": T5LayerNorm,
}
LEFT_ALONE = {"implicit_dim": "dim=None", "custom": "not an RMSNorm class reducekit knows",
              "scaled": "subclass of torch.nn.LayerNorm", "foreign": "defined in mypackage.layers"}


def make_model(with_left_alone=True):
    return Everything(with_left_alone).to(DEV)


def inputs(dtype=torch.float32):
    x = (torch.randn(BATCH, N, device=DEV) * 3 + 0.5).to(dtype)
    target = torch.randint(0, C * 8, (BATCH,), device=DEV)
    target[3] = -100  # ignore_index
    return x, target


def run(model, x, target):
    """The model's outputs and, after backward of the loss, its gradients and running statistics."""
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = model(x, target)
    (out["loss"] + out["h"].square().mean()).backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    grads["input"] = x.grad
    stats = {name: b for name, b in model.named_buffers() if b.is_floating_point()}
    return {k: v.detach() for k, v in out.items()}, grads, stats


def assert_matches_reference(got, ref, what):
    for name, r in ref.items():
        g = got[name]
        assert (g is None) == (r is None), f"{what} {name}: gradient presence differs"
        if r is not None:
            assert_close(g, r, torch.float32, r.abs().amax(), f"{what} {name}")


# ----------------------------------------------------------------------------- patch()

def test_patch_replaces_every_supported_module_and_reports_the_rest():
    model = make_model().train()
    types_before = {name: type(m) for name, m in model.named_modules()}
    report = reducekit.patch(model)
    by_name = {r.name: r for r in report}
    assert set(by_name) == set(REPLACED) | set(LEFT_ALONE), f"reported: {sorted(by_name)}"
    for name, cls in REPLACED.items():
        r = by_name[name]
        assert r.replaced, f"{name}: left alone: {r.new}"
        assert r.old is types_before[name], f"{name}: old class {r.old}"
        assert type(getattr(model, name)) is r.new, f"{name}: the module's class is not the reported one"
        if cls in HF_CLASSES.values():  # a subclass of transformers' class, made for it
            assert issubclass(r.new, cls) and r.new is not cls, f"{name}: {r.new}"
        else:
            assert r.new is cls, f"{name}: {r.new}"
        assert isinstance(getattr(model, name), types_before[name]), f"{name}: isinstance of its old class lost"
    for name, words in LEFT_ALONE.items():
        r = by_name[name]
        assert not r.replaced and words in r.new, f"{name}: {r.new!r}"
        assert type(getattr(model, name)) is types_before[name], f"{name}: changed although reported left alone"
    assert report.replaced == [r for r in report if r.name in REPLACED]
    assert "left alone: dim=None" in str(report)
    again = reducekit.patch(model)
    assert not again.replaced and {r.new for r in again if r.name in REPLACED} == {"already reducekit's"}


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_patched_model_matches_the_unpatched_one(mode):
    model = make_model()
    getattr(model, mode)()
    reference = copy.deepcopy(model).double()
    unpatched = copy.deepcopy(model)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    keys = list(model.state_dict().keys())
    reducekit.patch(model)
    assert list(model.state_dict().keys()) == keys, "state_dict keys changed"
    for name, p in model.named_parameters():
        assert p is params[name], f"{name}: not the same Parameter object"
    for name, b in model.named_buffers():
        assert b is buffers[name], f"{name}: not the same buffer object"
    assert all(m.training == (mode == "train") for m in model.modules()), "train/eval state changed"

    x, target = inputs()
    want = run(reference, x.double(), target)
    got = run(model, x, target)
    torch_fp32 = run(unpatched, x, target)
    for i, what in enumerate(("output", "gradient", "running statistic")):
        assert_matches_reference(torch_fp32[i], want[i], f"torch float32 {what}")  # the tolerance fits torch
        assert_matches_reference(got[i], want[i], f"patched {what}")
    assert int(model.bn2.num_batches_tracked) == int(reference.bn2.num_batches_tracked)


def test_dry_run_changes_nothing_and_unpatch_restores():
    model = make_model()
    types_before = [type(m) for m in model.modules()]
    dry = reducekit.patch(model, dry_run=True)
    assert [type(m) for m in model.modules()] == types_before, "dry_run changed a class"
    assert not any("_reducekit_patched_from" in vars(m) for m in model.modules())
    real = reducekit.patch(model)
    assert [(r.name, r.old, r.new) for r in dry] == [(r.name, r.old, r.new) for r in real], \
        "dry_run reported something else than the real run did"
    x, target = inputs()
    patched_out = model(x, target)["h"]
    undone = reducekit.unpatch(model)
    assert {r.name for r in undone} == set(REPLACED)
    assert [type(m) for m in model.modules()] == types_before, "unpatch did not restore every class"
    assert not any("_reducekit_patched_from" in vars(m) for m in model.modules())
    assert not hasattr(model.loss, "softcap"), "unpatch left reducekit's attributes behind"
    assert_close(model(x, target)["h"], patched_out.double(), torch.float32, patched_out.abs().amax(),
                 "unpatched again")


def test_hooks_and_shared_modules_are_kept():
    norm = torch.nn.LayerNorm(N).to(DEV)
    model = torch.nn.Sequential(norm, torch.nn.Linear(N, N), norm).to(DEV)  # one module, two places
    calls = []
    norm.register_forward_hook(lambda m, args, out: calls.append(type(m)))
    report = reducekit.patch(model)
    assert [r.name for r in report] == ["0"], "a shared module must be reported once"
    assert type(model[2]) is reducekit.nn.LayerNorm and model[0] is model[2]
    model(torch.randn(4, N, device=DEV))
    assert calls == [reducekit.nn.LayerNorm] * 2, f"forward hook calls: {calls}"


def test_the_model_itself_is_patched():
    model = torch.nn.LayerNorm(N).to(DEV)
    report = reducekit.patch(model)
    assert [(r.name, r.new) for r in report] == [("", reducekit.nn.LayerNorm)]
    assert type(model) is reducekit.nn.LayerNorm


def test_ops_selects_families():
    model = make_model()
    report = reducekit.patch(model, ops={"rms_norm"})
    replaced = {r.name for r in report.replaced}
    assert replaced == {"rms", "llama", "gemma", "t5"}, replaced
    assert "'layer_norm' is not in ops" in {r.name: r.new for r in report}["ln"]
    assert type(model.ln) is torch.nn.LayerNorm
    assert {r.name for r in reducekit.patch(model, ops="layer_norm").replaced} == {"ln", "ln_no_bias", "ln_plain"}
    with pytest.raises(ValueError, match="ops: unknown layernorm"):
        reducekit.patch(model, ops=["layernorm"])
    with pytest.raises(TypeError, match="ops:"):
        reducekit.patch(model, ops=3)
    with pytest.raises(TypeError, match="model:"):
        reducekit.patch([model])


def test_unsupported_configurations_are_left_alone_with_a_reason():
    on_cpu = Everything()
    report = reducekit.patch(on_cpu)
    assert not report.replaced, f"replaced on the CPU: {[r.name for r in report.replaced]}"
    for r in report:
        if r.name in REPLACED:
            assert "CUDA only" in r.new, f"{r.name}: {r.new!r}"
    assert not any("_reducekit_patched_from" in vars(m) for m in on_cpu.modules())
    assert type(on_cpu.ln) is torch.nn.LayerNorm and type(on_cpu.llama) is LlamaRMSNorm

    split = torch.nn.LayerNorm(N).to(DEV)
    split.bias = torch.nn.Parameter(torch.zeros(N))  # on the CPU, the weight on the GPU
    assert "CUDA only" in reducekit.patch(torch.nn.Sequential(split))[0].new

    extra = LlamaRMSNorm(N).to(DEV)
    extra.register_buffer("scale", torch.ones(1, device=DEV))
    (record,) = reducekit.patch(extra)
    assert not record.replaced and "holds more than" in record.new and "scale" in record.new

    no_eps = GemmaRMSNorm(N).to(DEV)
    no_eps.eps = None
    (record,) = reducekit.patch(no_eps)
    assert not record.replaced and "`eps`" in record.new

    tensorless = torch.nn.Sequential(torch.nn.Softmax(dim=-1))
    (record,) = reducekit.patch(tensorless)
    assert not record.replaced and "device is unknown" in record.new


# ----------------------------------------------------------------------------- transformers' roundings

def patched_pair(style, weight_dtype):
    original = HF_CLASSES[style](N).to(DEV)
    with torch.no_grad():
        original.weight.copy_((0.0 if style == "gemma" else 1.0) + 0.5 * torch.randn(N, device=DEV))
    original = original.to(weight_dtype)
    patched = copy.deepcopy(original)
    (record,) = reducekit.patch(patched)
    assert record.replaced, record.new
    assert isinstance(patched, HF_CLASSES[style]) and type(patched) is not HF_CLASSES[style]
    return original, patched


@pytest.mark.parametrize("style", sorted(HF_CLASSES))
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["w32", "wbf16", "wf16"])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["x32", "xbf16", "xf16"])
def test_transformers_rms_norms_keep_their_roundings(style, weight_dtype, x_dtype):
    original, patched = patched_pair(style, weight_dtype)
    x = (torch.randn(64, N, device=DEV) * 2).to(x_dtype)
    want, got = original(x), patched(x)
    assert got.dtype == want.dtype, f"dtype {got.dtype}, the original gives {want.dtype}"
    diff = (got.double() - want.double()).abs()
    if want.dtype == torch.float32:
        assert_close(got, want.double(), torch.float32, want.abs().amax(), f"{style}")
    else:
        # one unit in the last place where a float32 value lies next to a rounding boundary, and
        # rarely: a missing or extra rounding would differ in a large share of the elements
        assert bool((diff <= 2 * ulp(want.double(), want.dtype)).all()), f"{style}: off by {diff.max().item()}"
        share = (diff > 0).double().mean().item()
        assert share <= 0.02, f"{style}: {share:.1%} of the elements differ from the original's"


@pytest.mark.parametrize("style", sorted(HF_CLASSES))
def test_transformers_rms_norms_gradients(style):
    original, patched = patched_pair(style, torch.float32)
    reference = copy.deepcopy(original).double()
    x = torch.randn(64, N, device=DEV) * 2
    dy = torch.randn_like(x)
    results = []
    for module, inp in ((reference, x.double()), (patched, x), (original, x)):
        leaf = inp.clone().requires_grad_(True)
        module(leaf).backward(dy.to(inp.dtype))
        results.append((leaf.grad, module.weight.grad))
    for (gx, gw), what in zip(results[1:], ("patched", "original")):
        assert_close(gx, results[0][0], torch.float32, results[0][0].abs().amax(), f"{style} {what} dx")
        assert_close(gw, results[0][1], torch.float32, results[0][1].abs().amax(), f"{style} {what} dweight")


@pytest.mark.parametrize("style", sorted(HF_CLASSES))
def test_transformers_rms_norms_run_their_own_forward_for_float64(style):
    original, patched = patched_pair(style, torch.float64)
    x = torch.randn(8, N, device=DEV, dtype=torch.float64)
    assert torch.equal(patched(x), original(x)), "float64 input must take the class's own forward"


def test_patched_model_under_torch_compile():
    model = make_model(with_left_alone=False).eval()  # torch's Softmax(dim=None) warns: a graph break
    reducekit.patch(model)
    x, target = inputs()
    eager = model(x, target)
    compiled = torch.compile(model, fullgraph=True)(x, target)
    for name in eager:
        assert_close(compiled[name], eager[name].double(), torch.float32, eager[name].abs().amax(), name)


# ----------------------------------------------------------------------------- fused residual modules

@pytest.mark.parametrize("kind", ["AddLayerNorm", "AddRMSNorm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_residual_modules(kind, dtype):
    plain_cls = torch.nn.LayerNorm if kind == "AddLayerNorm" else torch.nn.RMSNorm
    plain = plain_cls(N, eps=1e-5).to(DEV)
    with torch.no_grad():
        for p in plain.parameters():
            p.copy_(torch.randn_like(p))
    fused = getattr(reducekit.nn, kind)(N, eps=1e-5).to(DEV)
    fused.load_state_dict(plain.state_dict())  # torch's state dict, unchanged
    assert list(fused.state_dict()) == list(plain.state_dict())
    x = torch.randn(37, N, device=DEV).to(dtype)
    r = torch.randn_like(x)
    y, s = fused(x, r)
    assert torch.equal(s, x + r), "the sum must be x + residual in x's dtype"
    assert y.dtype == dtype
    plain.double()
    assert_close(y, plain(s.double()), dtype, norm_scale(s, plain), kind)
    y0, s0 = fused(x)
    assert s0 is x, "residual=None returns x as the sum"
    assert_close(y0, plain(x.double()), dtype, norm_scale(x, plain), f"{kind} without a residual")


def norm_scale(s, norm):
    """|s| * rstd * |weight| + |bias| per element: the magnitude a norm output's rounding follows."""
    sd = s.double()
    centred = sd - sd.mean(-1, keepdim=True) if isinstance(norm, torch.nn.LayerNorm) else sd
    rstd = 1 / (centred.square().mean(-1, keepdim=True) + norm.eps).sqrt()
    bias = getattr(norm, "bias", None)
    return sd.abs() * rstd * norm.weight.double().abs() + (bias.double().abs() if bias is not None else 0)


@pytest.mark.parametrize("kind", ["AddLayerNorm", "AddRMSNorm"])
def test_residual_modules_backward(kind):
    plain_cls = torch.nn.LayerNorm if kind == "AddLayerNorm" else torch.nn.RMSNorm
    fused = getattr(reducekit.nn, kind)(N, eps=1e-5).to(DEV, torch.float64)
    plain = plain_cls(N, eps=1e-5).to(DEV, torch.float64)
    with torch.no_grad():
        for p in fused.parameters():
            p.copy_(torch.randn_like(p))
    plain.load_state_dict(fused.state_dict())
    x, r = (torch.randn(9, N, device=DEV, dtype=torch.float64) for _ in range(2))
    dy, ds = torch.randn_like(x), torch.randn_like(x)
    grads = []
    for module in (fused, plain):
        xl, rl = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
        if module is fused:
            y, s = module(xl, rl)
        else:
            s = xl + rl
            y = module(s)
        torch.autograd.backward([y, s], [dy, ds])
        grads.append([xl.grad, rl.grad] + [p.grad for p in module.parameters()])
    for got, want, name in zip(grads[0], grads[1], ("x", "residual", "weight", "bias")):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=name)
