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
a rounding boundary. torch.nn.SyncBatchNorm becomes reducekit.nn.SyncBatchNorm with its
process_group and settings; with no process group at work (eval, or training without an
initialized torch.distributed, where torch's module is BatchNorm on its own batch) it matches
torch's in float64.

reducekit.patch_functional: the functions it swaps are put back (after an exception, in nested
blocks), and calls reducekit does not take are torch's, to the bit (on the CPU, where every call
is left to torch, and with reducekit's functions replaced by spies to see which calls reach
them); on the GPU, calls through torch.nn.functional inside the block give reducekit's results
and gradients, the same bits as calling reducekit directly, and a compiled function traces
reducekit's operators inside the block and torch's outside. The CPU tests need no GPU, but they
import reducekit, which needs its compiled library: conftest.py skips this module, with the
reason, where torch, a GPU or a built reducekit is missing.
"""
import copy
import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F

import reducekit
import reducekit._patch
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


# ----------------------------------------------------------------------------- torch.nn.SyncBatchNorm

SYNC_BN_ATTRS = ("num_features", "eps", "momentum", "affine", "track_running_stats", "process_group", "training")


def sync_batch_norms(group):
    """torch.nn.SyncBatchNorm in the configurations patch() must keep: a process group of its own
    (a stand-in object here: only training under an initialized torch.distributed reads it), eps
    and momentum not the defaults, the cumulative average without affine parameters, and no
    running statistics (batch statistics in eval too). Parameters and running statistics away from
    their initial values, so that a swap losing one shows."""
    nn = torch.nn
    model = nn.ModuleDict({
        "grouped": nn.SyncBatchNorm(C, eps=1e-3, momentum=0.2, process_group=group),
        "cumulative": nn.SyncBatchNorm(C, momentum=None, affine=False),
        "untracked": nn.SyncBatchNorm(C, track_running_stats=False),
    }).to(DEV)
    with torch.no_grad():
        for m in model.values():
            if m.affine:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-1, 1)
            if m.track_running_stats:
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                m.num_batches_tracked.fill_(3)
    return model


def sync_bn_input(dtype, layout):
    x = (1.5 * torch.randn(BATCH, C, 5, 5, device=DEV) + 0.5).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_patch_replaces_sync_batch_norm(dtype, layout):
    """Each torch.nn.SyncBatchNorm becomes reducekit.nn.SyncBatchNorm, reported under "batch_norm",
    keeping its Parameters, buffers, process_group and settings; in eval (no process group
    involved, in torch's module as in reducekit's) its output matches torch's float64 one."""
    group = object()
    model = sync_batch_norms(group).eval()
    reference = copy.deepcopy(model).double()
    before = {name: {a: getattr(m, a) for a in SYNC_BN_ATTRS} for name, m in model.items()}
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    keys = list(model.state_dict())
    placed = {(t.device, t.dtype) for t in list(model.parameters()) + list(model.buffers())}
    report = reducekit.patch(model)
    assert [(r.name, r.old, r.new) for r in report] == \
        [(name, torch.nn.SyncBatchNorm, reducekit.nn.SyncBatchNorm) for name in model], str(report)
    assert [r.name for r in reducekit.patch(sync_batch_norms(group), ops={"batch_norm"}).replaced] == list(model)
    for name, m in model.items():
        assert type(m) is reducekit.nn.SyncBatchNorm and isinstance(m, torch.nn.SyncBatchNorm), name
        for attr, value in before[name].items():
            assert getattr(m, attr) is value or getattr(m, attr) == value, f"{name}.{attr} changed"
    assert model["grouped"].process_group is group
    assert list(model.state_dict()) == keys, "state_dict keys changed"
    assert all(p is params[n] for n, p in model.named_parameters()), "a Parameter was replaced"
    assert all(b is buffers[n] for n, b in model.named_buffers()), "a buffer was replaced"
    assert {(t.device, t.dtype) for t in list(model.parameters()) + list(model.buffers())} == placed, \
        "device or dtype changed"

    x = sync_bn_input(dtype, layout)
    for name, m in model.items():
        got, want = m(x), reference[name](x.double())
        assert got.is_contiguous(memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
        assert_close(got, want, dtype, want.abs().amax(), f"eval {name}")
    assert all(int(m.num_batches_tracked) == 3 for m in model.values() if m.track_running_stats), \
        "eval counted a batch"
    undone = reducekit.unpatch(model)
    assert [r.new for r in undone] == [torch.nn.SyncBatchNorm] * 3
    assert type(model["grouped"]) is torch.nn.SyncBatchNorm and model["grouped"].process_group is group


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_patched_sync_batch_norm_without_a_process_group(layout):
    """In training without an initialized torch.distributed, torch.nn.SyncBatchNorm is BatchNorm
    on the module's own batch (its process_group unread), and so is the patched module: outputs,
    gradients, running statistics and num_batches_tracked as torch's, against float64."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        pytest.skip("torch.distributed is initialized in this process: the modules would gather over its group")
    model = sync_batch_norms(object()).train()
    reference = copy.deepcopy(model).double()
    unpatched = copy.deepcopy(model)
    reducekit.patch(model)
    x = sync_bn_input(torch.float32, layout)
    dy = torch.randn_like(x)
    for name in model:
        runs = []
        for m, xi in ((model[name], x), (unpatched[name], x), (reference[name], x.double())):
            leaf = xi.clone().requires_grad_(True)
            y = m(leaf)
            y.backward(dy.to(xi.dtype))
            runs.append({"y": y.detach(), "dx": leaf.grad, "dweight": getattr(m.weight, "grad", None),
                         "dbias": getattr(m.bias, "grad", None), "running_mean": m.running_mean,
                         "running_var": m.running_var})
        got, torch_fp32, want = runs
        for key, r in want.items():
            if r is None:
                assert got[key] is None, f"{name} {key}: torch has none"
                continue
            assert_close(torch_fp32[key], r, torch.float32, r.abs().amax(), f"torch {name} {key}")  # the tolerance fits
            assert_close(got[key], r, torch.float32, r.abs().amax(), f"patched {name} {key}")
        if model[name].track_running_stats:
            assert int(model[name].num_batches_tracked) == int(unpatched[name].num_batches_tracked) == 4


# ----------------------------------------------------------------------------- transformers' roundings

def transformers_norm(style, weight_dtype):
    """A transformers-style norm whose weight is spread about its start (one; Gemma's offset zero)."""
    original = HF_CLASSES[style](N).to(DEV)
    with torch.no_grad():
        original.weight.copy_((0.0 if style == "gemma" else 1.0) + 0.5 * torch.randn(N, device=DEV))
    return original.to(weight_dtype)


def rounded_to(style, x_dtype):
    """Llama rounds the normalized value to the input's dtype before the weight multiplies it."""
    return x_dtype if style == "llama" else torch.float32


def patched_pair(style, weight_dtype):
    original = transformers_norm(style, weight_dtype)
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
    assert_same_roundings(patched(x), original(x), style, rounded_to(style, x_dtype))


def assert_same_roundings(got, want, what, rounded_to=torch.float32):
    """rounded_to: the dtype the normalized value was rounded to before a weight multiplied it
    (Llama's input dtype), the coarsest rounding inside want."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, the original gives {want.dtype}"
    diff = (got.double() - want.double()).abs()
    coarsest = rounded_to if torch.finfo(rounded_to).eps > torch.finfo(want.dtype).eps else want.dtype
    if coarsest == torch.float32:
        assert_close(got, want.double(), torch.float32, want.abs().amax(), what)
    else:
        # one unit in the last place where a float32 value lies next to a rounding boundary (times
        # a weight: under two units of the product), and rarely: a missing or extra rounding would
        # differ in a large share of the elements
        assert bool((diff <= 2 * ulp(want.double(), coarsest)).all()), f"{what}: off by {diff.max().item()}"
        share = (diff > 0).double().mean().item()
        assert share <= 0.02, f"{what}: {share:.1%} of the elements differ from the original's"


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


# ----------------------------------------------------------------------------- RMSNorm's model-style options

STYLE_OPTIONS = {"llama": {"round_before_weight": True}, "gemma": {"weight_offset": 1.0}}


def styled_like(original, style, cls=reducekit.nn.RMSNorm):
    """reducekit's module with the options that reproduce a transformers-style norm, loaded from
    its state dict."""
    ours = cls(N, eps=1e-6, **STYLE_OPTIONS[style]).to(DEV)
    ours.load_state_dict(original.state_dict())
    return ours.to(original.weight.dtype)


@pytest.mark.parametrize("style", sorted(STYLE_OPTIONS))
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["w32", "wbf16", "wf16"])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["x32", "xbf16", "xf16"])
def test_rms_norm_options_give_transformers_roundings(style, weight_dtype, x_dtype):
    """RMSNorm(round_before_weight=True) rounds as LlamaRMSNorm, RMSNorm(weight_offset=1.0) as
    GemmaRMSNorm, and AddRMSNorm's y with the same options as the original applied to the sum."""
    x = (torch.randn(64, N, device=DEV) * 2).to(x_dtype)
    original = transformers_norm(style, weight_dtype)
    rounding = rounded_to(style, x_dtype)
    assert_same_roundings(styled_like(original, style)(x), original(x), f"{style} RMSNorm", rounding)
    add = styled_like(original, style, reducekit.nn.AddRMSNorm)
    r = torch.randn_like(x)
    y, s = add(x, r)
    assert torch.equal(s, x + r)
    assert_same_roundings(y, original(x + r), f"{style} AddRMSNorm", rounding)
    y0, s0 = add(x)
    assert s0 is x
    assert_same_roundings(y0, original(x), f"{style} AddRMSNorm without a residual", rounding)


@pytest.mark.parametrize("style", sorted(STYLE_OPTIONS))
def test_rms_norm_options_gradients(style):
    original = transformers_norm(style, torch.float32)
    ours, reference = styled_like(original, style), copy.deepcopy(original).double()
    x = torch.randn(64, N, device=DEV) * 2
    dy = torch.randn_like(x)
    results = []
    for module, inp in ((reference, x.double()), (ours, x)):
        leaf = inp.clone().requires_grad_(True)
        module(leaf).backward(dy.to(inp.dtype))
        results.append((leaf.grad, module.weight.grad))
    (want_dx, want_dw), (dx, dw) = results
    assert_close(dx, want_dx, torch.float32, want_dx.abs().amax(), f"{style} dx")
    assert_close(dw, want_dw, torch.float32, want_dw.abs().amax(), f"{style} dweight")


def test_rms_norm_options_init_state_dict_and_compile():
    """The offset weight starts at zero (the scale at one: torch's RMSNorm's output, bit for bit)
    and comes back there on reset_parameters; the state dict stays torch's; the options show in
    the repr; a bias and out_dtype combine with them; torch.compile(fullgraph=True) gives eager's
    results; weight_offset without a weight is refused, naming the argument."""
    x = torch.randn(32, N, device=DEV, dtype=torch.bfloat16)
    gemma = reducekit.nn.RMSNorm(N, eps=1e-6, weight_offset=1.0).to(DEV)
    assert torch.equal(gemma.weight, torch.zeros_like(gemma.weight))
    assert torch.equal(gemma(x), reducekit.nn.RMSNorm(N, eps=1e-6).to(DEV)(x))
    with torch.no_grad():
        gemma.weight.normal_()
    gemma.reset_parameters()
    assert torch.equal(gemma.weight, torch.zeros_like(gemma.weight))
    assert set(gemma.state_dict()) == set(torch.nn.RMSNorm(N).state_dict())
    assert "weight_offset=1.0" in repr(gemma)
    llama = reducekit.nn.RMSNorm(N, eps=1e-6, bias=True, round_before_weight=True, out_dtype=torch.float32).to(DEV)
    assert "round_before_weight=True" in repr(llama) and "bias=True" in repr(llama)
    with torch.no_grad():
        llama.weight.normal_()
        llama.bias.normal_()
    normed = reducekit.rms_norm(x, [N], None, 1e-6)  # rounded to bfloat16 first
    want = (llama.weight * normed + llama.bias).float()
    assert llama(x).dtype == torch.float32 and torch.equal(llama(x), want)

    def f(x):
        return gemma(x), llama(x)

    for got, want in zip(torch.compile(f, fullgraph=True)(x), f(x)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="weight_offset"):
        reducekit.nn.RMSNorm(N, weight_offset=1.0, elementwise_affine=False)


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


# ----------------------------------------------------------------------------- patch_functional()

FUNCTIONAL = ["softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "cross_entropy"]


def functional_now():
    return {name: getattr(F, name) for name in FUNCTIONAL}


def params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_patch_functional_replaces_and_restores():
    torch_fns = functional_now()
    with reducekit.patch_functional() as report:
        assert [r.name for r in report] == [f"torch.nn.functional.{name}" for name in FUNCTIONAL]
        for r, name in zip(report, FUNCTIONAL):
            assert r.replaced and r.old is torch_fns[name], f"{name}: {r}"
            assert getattr(F, name) is r.new and r.new is not torch_fns[name], f"{name}: not replaced"
            # the same signature, so every call torch's function takes binds as it would there
            assert params(r.new) == params(torch_fns[name]), f"{name}: {inspect.signature(r.new)}"
        assert "torch.nn.functional.softmax (torch.nn.functional.softmax) -> reducekit._patch.softmax" in str(report)
        first = [r.new for r in report]
    assert functional_now() == torch_fns, "not put back"
    with reducekit.patch_functional() as again:
        # one replacement a function: torch.compile's guards on it hold from one block to the next
        assert [r.new for r in again] == first
    assert functional_now() == torch_fns


def test_patch_functional_restores_after_an_exception():
    torch_fns = functional_now()
    with pytest.raises(KeyError, match="inside"):
        with reducekit.patch_functional():
            assert F.softmax is not torch_fns["softmax"]
            raise KeyError("inside")
    assert functional_now() == torch_fns


def test_patch_functional_nests():
    torch_fns = functional_now()
    with reducekit.patch_functional(ops={"softmax"}) as outer:
        assert [r.name for r in outer.replaced] == ["torch.nn.functional.softmax"]
        assert "'layer_norm' is not in ops" in {r.name: r.new for r in outer}["torch.nn.functional.layer_norm"]
        ours = F.softmax
        with reducekit.patch_functional() as inner:
            reasons = {r.name.rsplit(".", 1)[1]: r.new for r in inner}
            assert reasons["softmax"] == "already reducekit's" and F.softmax is ours
            assert {r.name for r in inner.replaced} == {f"torch.nn.functional.{n}" for n in FUNCTIONAL} - \
                {"torch.nn.functional.softmax"}
        # the inner block put back only what it replaced
        assert F.softmax is ours
        assert {n: f for n, f in functional_now().items() if n != "softmax"} == \
            {n: f for n, f in torch_fns.items() if n != "softmax"}
    assert functional_now() == torch_fns


def test_patch_functional_ops():
    torch_fns = functional_now()
    with pytest.raises(ValueError, match="ops: unknown layernorm"):
        with reducekit.patch_functional(ops=["softmax", "layernorm"]):
            pass
    with pytest.raises(TypeError, match="ops:"):
        with reducekit.patch_functional(ops=3):
            pass
    assert functional_now() == torch_fns, "a refused call changed something"
    with reducekit.patch_functional(ops="cross_entropy") as report:
        assert [r.name for r in report.replaced] == ["torch.nn.functional.cross_entropy"]
        assert F.layer_norm is torch_fns["layer_norm"]
    assert functional_now() == torch_fns


def cpu_calls():
    """Calls of every kind, on CPU tensors, as code using torch.nn.functional makes them: each
    takes the functions to call (F's or, to compare, torch's) and `leaf`, which makes the leaf
    tensors whose gradients are compared."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(BATCH, N, generator=g)
    w, b = torch.randn(N, generator=g), torch.randn(N, generator=g)
    x4 = torch.randn(4, C, 3, 3, generator=g)
    cw, cb = torch.randn(C, generator=g), torch.randn(C, generator=g)
    target = torch.randint(0, N, (BATCH,), generator=g)
    probs = torch.softmax(torch.randn(BATCH, N, generator=g), -1)
    return {
        "softmax": lambda f, leaf: f["softmax"](leaf(x), -1),
        "softmax dtype": lambda f, leaf: f["softmax"](leaf(x), dim=0, dtype=torch.float64),
        "log_softmax": lambda f, leaf: f["log_softmax"](leaf(x), 1, 3, None),
        "layer_norm": lambda f, leaf: f["layer_norm"](leaf(x), (N,), leaf(w), leaf(b), eps=1e-3),
        "rms_norm": lambda f, leaf: f["rms_norm"](leaf(x), [N], weight=leaf(w)),
        "batch_norm train": lambda f, leaf: f["batch_norm"](leaf(x4), torch.zeros(C), torch.ones(C), leaf(cw),
                                                            leaf(cb), training=True, momentum=0.3),
        "batch_norm eval": lambda f, leaf: f["batch_norm"](leaf(x4), cb.abs(), cw.abs() + 0.5, cw, cb),
        "cross_entropy": lambda f, leaf: f["cross_entropy"](leaf(x), target, label_smoothing=0.1, reduction="sum"),
        "cross_entropy probs": lambda f, leaf: f["cross_entropy"](leaf(x), probs, weight=w.abs()),
        "LayerNorm module": lambda f, leaf: torch.nn.LayerNorm(N)(leaf(x)),  # its forward calls F.layer_norm
    }


def output_and_grads(call, functions):
    """call's output and, after its backward, the gradients of the leaves it made."""
    leaves = []

    def leaf(t):
        leaves.append(t.clone().requires_grad_(True))
        return leaves[-1]

    out = call(functions, leaf)
    out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype))
    return [out.detach()] + [t.grad for t in leaves]


def test_patch_functional_leaves_cpu_calls_to_torch():
    calls = cpu_calls()
    torch_fns = functional_now()
    want = {name: output_and_grads(call, torch_fns) for name, call in calls.items()}
    with reducekit.patch_functional():
        got = {name: output_and_grads(call, vars(F)) for name, call in calls.items()}
    for name in calls:
        assert len(got[name]) == len(want[name]), f"{name}: other leaves"
        for g, w in zip(got[name], want[name]):
            assert g.dtype == w.dtype and torch.equal(g, w), f"{name}: not torch's result"


def test_patch_functional_keeps_torchs_warning_place():
    """F.softmax(x) without dim warns at the caller's line, through the replacement too."""
    x = torch.randn(3, 4)
    with reducekit.patch_functional(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        F.softmax(x)
    assert [w.filename for w in caught] == [__file__], [(w.filename, str(w.message)) for w in caught]


class TaggedTensor(torch.Tensor):
    """A tensor subclass: torch's functions handle it through __torch_function__."""


SPIED = {"softmax": "_softmax", "log_softmax": "_softmax", "layer_norm": "_norm", "rms_norm": "_norm",
         "batch_norm": "_batch_norm", "cross_entropy": "_loss"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_patch_functional_routes_only_calls_reducekit_takes(device, monkeypatch):
    """Which calls reach reducekit's functions (replaced by spies here) and which are torch's:
    on the CPU with the device check widened to it, and on the GPU as it is."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    if device == "cpu":
        monkeypatch.setattr(reducekit._patch, "_runs_on", lambda d: d.type in ("cpu", "cuda"))
    seen = []
    for name, module in SPIED.items():
        def spy(*args, name=name, **kwargs):
            seen.append((name, args, kwargs))
            return "reducekit"
        monkeypatch.setattr(getattr(reducekit, module), name, spy)

    def t(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=device).to(dtype)

    x, w, b = t(BATCH, N), t(N), t(N)
    x4, cw, cb, rm, rv = t(4, C, 3, 3), t(C), t(C), t(C), t(C).abs()
    target = torch.randint(0, N, (BATCH,), device=device)
    reducekit_calls = {
        "softmax": lambda: F.softmax(x, -1),
        "softmax dtype": lambda: F.softmax(x, dim=0, dtype=torch.float64),
        "log_softmax": lambda: F.log_softmax(x, 1),
        "layer_norm": lambda: F.layer_norm(x, (N,), w, b),
        "layer_norm bf16, float32 params": lambda: F.layer_norm(x.bfloat16(), (N,), w, b),
        "rms_norm": lambda: F.rms_norm(x, [N], w, 1e-6),
        "batch_norm train": lambda: F.batch_norm(x4, rm.clone(), rv.clone(), cw, cb, True),
        "batch_norm eval": lambda: F.batch_norm(x4, rm, rv, training=False),
        "batch_norm no stats": lambda: F.batch_norm(x4, None, None, cw, cb, training=True),
        "cross_entropy": lambda: F.cross_entropy(x, target, w.abs(), ignore_index=3),
        "cross_entropy probs": lambda: F.cross_entropy(x, x.softmax(-1), label_smoothing=0.1),
        "cross_entropy [N, C, d]": lambda: F.cross_entropy(x4, target[:4, None, None].expand(4, 3, 3) % C),
        "LayerNorm module": lambda: torch.nn.LayerNorm(N, device=device)(x),
        "CrossEntropyLoss module": lambda: torch.nn.CrossEntropyLoss()(x, target),
    }
    torch_calls = {
        "softmax dim=None": lambda: F.softmax(x),
        "softmax of integers": lambda: F.softmax(target, -1, dtype=torch.float32),
        "softmax of a subclass": lambda: F.softmax(x.as_subclass(TaggedTensor), -1),
        "log_softmax rank 9": lambda: F.log_softmax(x.reshape([1] * 7 + [BATCH, N]), -1),
        "rms_norm float64 x, float32 weight": lambda: F.rms_norm(x.double(), [N], w),
        "rms_norm bfloat16 x, float16 weight": lambda: F.rms_norm(x.bfloat16(), [N], w.half()),
        "batch_norm rank 6": lambda: F.batch_norm(x4[..., None, None], rm, rv),
        "cross_entropy size_average": lambda: F.cross_entropy(x, target, size_average=False),
        "cross_entropy reduce": lambda: F.cross_entropy(x, target, reduce=False),
        "softmax under autocast": lambda: autocast(device, lambda: F.softmax(x, -1)),
        "layer_norm under autocast": lambda: autocast(device, lambda: F.layer_norm(x, (N,), w, b)),
    }
    torch_may_refuse = {  # with torch's error, not reducekit's (whether torch takes it is torch's affair)
        "layer_norm float64 weight": lambda: F.layer_norm(x, (N,), w.double(), b.double()),
        "cross_entropy probs with ignore_index": lambda: F.cross_entropy(x, x.softmax(-1), ignore_index=1),
    }
    with reducekit.patch_functional(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dim=None and size_average warn, as in torch's own calls
        for what, call in reducekit_calls.items():
            seen.clear()
            assert call() == "reducekit" and len(seen) == 1, f"{what}: did not reach reducekit ({seen})"
        for what, call in torch_calls.items():
            seen.clear()
            out = call()
            assert isinstance(out, torch.Tensor) and not seen, f"{what}: reached reducekit ({seen})"
        for what, call in torch_may_refuse.items():
            seen.clear()
            try:
                call()
            except RuntimeError:
                pass
            assert not seen, f"{what}: reached reducekit ({seen})"
    # the arguments as reducekit's functions take them (positional, in their order)
    with reducekit.patch_functional():
        seen.clear()
        F.softmax(x, dim=0, dtype=torch.float64)
        F.rms_norm(x, [N], eps=1e-3)
        F.batch_norm(x4, rm, rv, cw, cb, True, 0.5, 1e-3)
        F.cross_entropy(x, target, None, None, 5, None, "sum", 0.25)
    assert [(name, args[1:]) for name, args, _ in seen] == [
        ("softmax", (0, torch.float64)), ("rms_norm", ([N], None, 1e-3)),
        ("batch_norm", (rm, rv, cw, cb, True, 0.5, 1e-3)), ("cross_entropy", (target, None, 5, "sum", 0.25))], seen


def autocast(device, call):
    with torch.autocast(device, dtype=torch.bfloat16):
        return call()


# -------- on the GPU

def functional_tensors(dtype):
    """The tensors functional_cases take: x of dtype, its norm parameters in its dtype, batch
    norm's per-channel tensors in float32 (as torch's modules keep them for 16-bit input)."""
    return {
        "x": (torch.randn(BATCH, N, device=DEV) * 3 + 0.5).to(dtype),
        "w": (1 + 0.5 * torch.randn(N, device=DEV)).to(dtype), "b": torch.randn(N, device=DEV).to(dtype),
        "x4": (torch.randn(8, C, 5, 5, device=DEV) * 2 + 1).to(dtype),
        "cw": 1 + 0.5 * torch.randn(C, device=DEV), "cb": torch.randn(C, device=DEV),
        "rm": torch.randn(C, device=DEV), "rv": torch.rand(C, device=DEV) + 0.5,
        "target": torch.randint(0, N, (BATCH,), device=DEV),
        "probs": torch.softmax(torch.randn(BATCH, N, device=DEV), -1).to(dtype),
    }


# Each: a call made through `api` (torch.nn.functional or reducekit: the keywords are the same).
FUNCTIONAL_CASES = {
    "softmax": lambda api, t: api.softmax(t["x"], dim=-1),
    "softmax dtype": lambda api, t: api.softmax(t["x"], dim=0, dtype=torch.float32),
    "log_softmax": lambda api, t: api.log_softmax(t["x"], dim=1),
    "layer_norm": lambda api, t: api.layer_norm(t["x"], (N,), weight=t["w"], bias=t["b"], eps=1e-5),
    "rms_norm": lambda api, t: api.rms_norm(t["x"], [N], weight=t["w"]),
    "batch_norm train": lambda api, t: api.batch_norm(t["x4"], t["rm"], t["rv"], weight=t["cw"], bias=t["cb"],
                                                      training=True, momentum=0.2),
    "batch_norm eval": lambda api, t: api.batch_norm(t["x4"], t["rm"], t["rv"], weight=t["cw"], bias=t["cb"]),
    "cross_entropy": lambda api, t: api.cross_entropy(t["x"], t["target"], label_smoothing=0.1),
    "cross_entropy probs": lambda api, t: api.cross_entropy(t["x"], t["probs"], reduction="sum"),
}
GRAD_LEAVES = ("x", "x4", "w", "b", "cw", "cb")


def fresh(tensors, requires_grad=False, double=False):
    """Copies (batch norm updates its running statistics in place), leaves where asked."""
    out = {}
    for k, v in tensors.items():
        v = v.double() if double and v.is_floating_point() else v.clone()
        out[k] = v.requires_grad_(True) if requires_grad and k in GRAD_LEAVES else v
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(FUNCTIONAL_CASES))
def test_patch_functional_runs_reducekit_on_the_gpu(case, dtype):
    call, base = FUNCTIONAL_CASES[case], functional_tensors(dtype)
    reference = fresh(base, double=True)
    want = call(F, reference)  # torch's, in float64
    direct_tensors, block_tensors = fresh(base), fresh(base)
    direct = call(reducekit, direct_tensors)
    with reducekit.patch_functional():
        got = call(F, block_tensors)
    assert torch.equal(got, direct), f"{case}: not reducekit's result"
    for k in base:  # batch norm's running statistics alike
        assert torch.equal(block_tensors[k], direct_tensors[k]), f"{case}: {k} differs from reducekit's"
    assert_close(got, want, got.dtype, want.abs().amax(), f"{case} against torch")
    if case == "batch_norm train":
        for k in ("rm", "rv"):
            assert_close(block_tensors[k], reference[k], torch.float32, reference[k].abs().amax(), f"{case} {k}")


@pytest.mark.parametrize("case", sorted(FUNCTIONAL_CASES))
def test_patch_functional_gradients_on_the_gpu(case):
    call, base = FUNCTIONAL_CASES[case], functional_tensors(torch.float32)
    grads = []
    for api, tensors in ((reducekit, fresh(base, True)), ("block", fresh(base, True)), (F, fresh(base, True, True))):
        if api == "block":
            with reducekit.patch_functional():
                out = call(F, tensors)
        else:
            out = call(api, tensors)
        out.backward(torch.linspace(-1, 1, out.numel(), device=DEV).reshape(out.shape).to(out.dtype))
        grads.append({k: tensors[k].grad for k in GRAD_LEAVES})
    direct, block, torch64 = grads
    for k in GRAD_LEAVES:
        assert (block[k] is None) == (torch64[k] is None), f"{case} d{k}: gradient presence differs from torch's"
        if block[k] is not None:
            assert torch.equal(block[k], direct[k]), f"{case} d{k}: not reducekit's gradient"
            assert_close(block[k], torch64[k], torch.float32, torch64[k].abs().amax(), f"{case} d{k}")


def test_patch_functional_under_torch_compile():
    x = torch.randn(BATCH, N, device=DEV)
    w, b = torch.randn(N, device=DEV), torch.randn(N, device=DEV)

    def f(t):
        return F.layer_norm(F.softmax(t, -1) * N, (N,), w, b)

    graphs = []

    def recording(gm, example_inputs):  # a backend that keeps the graph and runs it as it is
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(f, backend=recording, fullgraph=True)
    direct = reducekit.layer_norm(reducekit.softmax(x, -1) * N, (N,), w, b)
    with reducekit.patch_functional():
        assert torch.equal(compiled(x), direct)
        assert len(graphs) == 1 and ran_reducekit(graphs[0]), graphs[0].code
        # torch's default backend, forward and backward
        xg = x.clone().requires_grad_(True)
        out = torch.compile(f, fullgraph=True)(xg)
        out.square().sum().backward()
    assert_close(out, direct.double(), torch.float32, direct.abs().amax(), "inductor")
    xr = x.clone().requires_grad_(True)
    reducekit.layer_norm(reducekit.softmax(xr, -1) * N, (N,), w, b).square().sum().backward()
    assert_close(xg.grad, xr.grad.double(), torch.float32, xr.grad.abs().amax(), "inductor dx")
    # after the block: the guard on F.layer_norm fails, so torch's functions are traced anew
    torch.testing.assert_close(compiled(x), f(x))
    assert len(graphs) == 2 and not ran_reducekit(graphs[1]), graphs[1].code
    with reducekit.patch_functional():  # the first graph's guards hold again: no third trace
        assert torch.equal(compiled(x), direct)
    assert len(graphs) == 2


def test_patch_functional_keeps_torch_compiles_table():
    """torch.compile's table of torch's functions, remade during a block (as
    torch.distributed.init_process_group has it remade), holds the replacements, which a graph
    would keep unopened; after the block it is made again with torch's functions."""
    trace_rules = pytest.importorskip("torch._dynamo.trace_rules")
    table = getattr(trace_rules, "get_torch_obj_rule_map", None)
    if table is None:
        pytest.skip("this torch has no torch._dynamo.trace_rules.get_torch_obj_rule_map")
    with reducekit.patch_functional():
        ours = F.softmax
        table.cache_clear()
        assert ours in table(), "remade in the block, the table should hold the replacement"
    assert F.softmax in table() and ours not in table(), "the table was not made again"
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with reducekit.patch_functional():
        torch.compile(lambda t: F.softmax(t, -1), backend=recording, fullgraph=True)(
            torch.randn(BATCH, N, device=DEV))
    assert ran_reducekit(graphs[0]), graphs[0].code


def ran_reducekit(gm):
    return any("reducekit" in str(node.target) for node in gm.graph.nodes)
