# SPDX-License-Identifier: Apache-2.0
"""reducekit.patch: swap the modules of an existing torch model for reducekit's, in place; and
reducekit.patch_functional: swap torch.nn.functional's functions for the length of a `with` block.

    report = reducekit.patch(model)                       # every module reducekit can run
    report = reducekit.patch(model, ops={"rms_norm"})     # one family
    report = reducekit.patch(model, dry_run=True)         # only say what would happen
    print(report)                                         # a line a module: replaced, or why not
    reducekit.unpatch(model)                              # the original classes back

    with reducekit.patch_functional() as report:          # F.softmax & co. for code that calls them
        loss = F.cross_entropy(model(x), target)          # reducekit's where it takes the call

What it swaps (the exact classes, not subclasses, whose forward may differ):
    torch.nn.LayerNorm                -> reducekit.nn.LayerNorm      ("layer_norm")
    torch.nn.RMSNorm                  -> reducekit.nn.RMSNorm        ("rms_norm")
    torch.nn.BatchNorm1d / 2d / 3d    -> reducekit.nn.BatchNorm1d .. ("batch_norm")
    torch.nn.SyncBatchNorm            -> reducekit.nn.SyncBatchNorm  ("batch_norm"; its
        process_group kept: statistics over the group's ranks in training under an initialized
        torch.distributed, the module's own batch otherwise, as torch's)
    torch.nn.Softmax / LogSoftmax     -> reducekit.nn.Softmax / ..   ("softmax", "log_softmax")
    torch.nn.CrossEntropyLoss         -> reducekit.nn.CrossEntropyLoss ("cross_entropy")
    transformers' RMSNorm classes     -> a subclass of the same class ("rms_norm"), recognised by
        class name and defining module (transformers.*), never by importing transformers:
        Llama style (Llama, Mistral, Mixtral, Qwen2, Qwen2Moe, Qwen3, Qwen3Moe, Phi3): normalize
        in float32, round to the input's dtype, then multiply by weight;
        Gemma style (Gemma, Gemma2, Gemma3): scale by (1 + weight) in float32, round once;
        T5 style (T5LayerNorm, MT5LayerNorm, UMT5LayerNorm): normalize in float32, round to the
        weight's dtype when it is 16-bit, then multiply by weight.
    Each replacement does the same roundings to the same dtypes as the forward it replaces
    (the arithmetic inside a rounding is float32 in both, in another order: results agree within
    the float32 tolerances, and 16-bit results within one unit in the last place where a float32
    value falls next to a rounding boundary). Inputs a replacement cannot match that way
    (float64 for the transformers classes, whose own forwards compute in float32) or that are
    not on a GPU run the class's own forward.

How: a module keeps its identity and only changes class (`module.__class__ = replacement`, as
torch.nn.utils.parametrize does), and every replacement is a subclass of the class it replaces.
So the module keeps its Parameter and buffer objects (an optimizer built before still holds
them), its state_dict keys, device, dtype, train/eval state, hooks of every kind, and every
reference to it (a module shared by two parents, a module kept in a list elsewhere);
isinstance(module, torch.nn.LayerNorm) stays true. Each swapped module records the class it had
(`_reducekit_patched_from`, not in its state dict), which unpatch() restores.

Left alone, with the reason in the report: a module whose tensors are not all on one CUDA device,
or of a dtype reducekit does not take, or tensor subclasses (DTensor and the like); a module
without tensors (Softmax, a CrossEntropyLoss without class weights, a LayerNorm without
parameters) when the model's tensors are not all on CUDA; Softmax / LogSoftmax with dim=None;
subclasses of the classes above; RMSNorm-like classes not recognised above. Patch after moving
the model to its GPU and dtype: the replacements of torch's modules raise on CPU tensors.

Limits a patched model has at call time: CrossEntropyLoss's class-probability targets of another
dtype than the input's run composed (reducekit.log_softmax, a product, reducekit.sum); a model pickled whole (torch.save(model), not
its state_dict) holding a swapped transformers class unpickles only in a process that made the
same swap, so pickle it after unpatch(). A model compiled before patch() is compiled again.

patch_functional() is described at its definition (below).
"""
import contextlib
from typing import Callable, Iterable, NamedTuple, Optional, Union

import torch
import torch.nn.functional as F

from . import _batch_norm, _loss, _norm, _softmax
from . import nn as _rk_nn
from ._norm import rms_norm

# The dtypes reducekit's kernels take (weights, biases and statistics alike).
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# Inputs whose normalization reducekit computes in float32, as transformers' forwards do.
_FLOAT32_MATH = (torch.float32, torch.float16, torch.bfloat16)
_HALF = (torch.float16, torch.bfloat16)


def _runs_on(device: torch.device) -> bool:
    """Where reducekit's operators run (one place, so a CPU check of the logic can widen it)."""
    return device.type == "cuda"


# ----------------------------------------------------------------------------- transformers' RMSNorms
# transformers' RMSNorm classes differ only in where they round; each mixin below repeats one
# family's roundings with reducekit's rms_norm and hands anything else to the class's own forward
# (super().forward: the mixin comes first in the swapped class's bases).

class _LlamaStyleRMSNorm:
    """weight * (x in float32 * rstd).to(x.dtype): the normalized value is rounded to the input's
    dtype before the weight multiplies it, with torch's type promotion (a float32 weight on
    bfloat16 input gives float32)."""

    _reducekit_style = "llama"

    def forward(self, hidden_states):
        x = hidden_states
        if not (_runs_on(x.device) and x.dtype in _FLOAT32_MATH):
            return super().forward(x)
        eps = self.variance_epsilon
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # The intermediate rounding is to float32 itself: fusing the weight drops one float32
            # rounding and no other.
            return rms_norm(x, [x.shape[-1]], self.weight, eps)
        return self.weight * rms_norm(x, [x.shape[-1]], None, eps)


class _GemmaStyleRMSNorm:
    """(x in float32 * rstd * (1 + weight in float32)).to(x.dtype): the weight stores the offset
    from one, everything is float32, and the result is rounded once, as reducekit.rms_norm does
    with a float32 weight."""

    _reducekit_style = "gemma"

    def forward(self, x):
        if not (_runs_on(x.device) and x.dtype in _FLOAT32_MATH):
            return super().forward(x)
        return rms_norm(x, [x.shape[-1]], 1.0 + self.weight.float(), self.eps)


class _T5StyleRMSNorm:
    """weight * (x in float32 * rstd), the normalized value rounded to the weight's dtype first
    when that is float16 or bfloat16 (transformers' T5LayerNorm; releases before bfloat16
    support rounded only to float16, so a bfloat16 weight follows the current release)."""

    _reducekit_style = "t5"

    def forward(self, hidden_states):
        x, w = hidden_states, self.weight
        if not (_runs_on(x.device) and x.dtype in _FLOAT32_MATH and w.dtype in _FLOAT32_MATH):
            return super().forward(x)
        eps = self.variance_epsilon
        if w.dtype in _HALF:
            # reducekit rounds to x's dtype: feed it float32 unless that is already w's dtype
            src = x if x.dtype in (w.dtype, torch.float32) else x.float()
            return w * rms_norm(src, [x.shape[-1]], None, eps).to(w.dtype)
        # float32 weight: the normalized value stays float32, so the product is one float32 rounding
        return rms_norm(x.float(), [x.shape[-1]], w, eps)


# class name -> (mixin, the attribute holding eps)
_TRANSFORMERS_RMS_NORMS = {
    **{name: (_LlamaStyleRMSNorm, "variance_epsilon")
       for name in ("LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen2MoeRMSNorm",
                    "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Phi3RMSNorm")},
    **{name: (_GemmaStyleRMSNorm, "eps") for name in ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")},
    **{name: (_T5StyleRMSNorm, "variance_epsilon") for name in ("T5LayerNorm", "MT5LayerNorm", "UMT5LayerNorm")},
}

_swapped_classes = {}  # original class -> its reducekit subclass, one per class (isinstance, caching)


def _reducekit_subclass(original: type, mixin: type) -> type:
    cls = _swapped_classes.get(original)
    if cls is None:
        name = f"Reducekit{original.__name__}"
        while name in globals():  # another class of the same name (another transformers module)
            name += "_"
        cls = type(name, (mixin, original),
                   {"__module__": __name__, "__doc__": f"{original.__qualname__} on reducekit.rms_norm "
                                                       f"({mixin._reducekit_style} style). {mixin.__doc__}"})
        # Found by name, so a patched model pickles (and unpickles where the same swap was made).
        globals()[name] = cls
        _swapped_classes[original] = cls
    return cls


def _is_transformers_class(cls: type) -> bool:
    return cls.__module__ == "transformers" or cls.__module__.startswith("transformers.")


# ----------------------------------------------------------------------------- what patch() swaps

def _torch_replacements():
    table = {
        torch.nn.LayerNorm: ("layer_norm", _rk_nn.LayerNorm),
        torch.nn.BatchNorm1d: ("batch_norm", _rk_nn.BatchNorm1d),
        torch.nn.BatchNorm2d: ("batch_norm", _rk_nn.BatchNorm2d),
        torch.nn.BatchNorm3d: ("batch_norm", _rk_nn.BatchNorm3d),
        # One family with BatchNorm*d (ops={"batch_norm"} swaps every batch norm): the same
        # kernels run both, the synced module adding a gather of per-channel statistics.
        torch.nn.SyncBatchNorm: ("batch_norm", _rk_nn.SyncBatchNorm),
        torch.nn.Softmax: ("softmax", _rk_nn.Softmax),
        torch.nn.LogSoftmax: ("log_softmax", _rk_nn.LogSoftmax),
        torch.nn.CrossEntropyLoss: ("cross_entropy", _rk_nn.CrossEntropyLoss),
    }
    if hasattr(torch.nn, "RMSNorm"):  # torch 2.4 and later
        table[torch.nn.RMSNorm] = ("rms_norm", _rk_nn.RMSNorm)
    return table


_TORCH_REPLACEMENTS = _torch_replacements()
OP_FAMILIES = frozenset(family for family, _ in _TORCH_REPLACEMENTS.values())
# Classes reducekit defines: already reducekit's, whatever torch class they derive from.
_REDUCEKIT_CLASSES = frozenset(
    [cls for _, cls in _TORCH_REPLACEMENTS.values()] + [_rk_nn.AddLayerNorm, _rk_nn.AddRMSNorm])


class PatchRecord(NamedTuple):
    """One module patch() looked at: `new` is the class it has (or would have) now, or a str
    saying why it was left alone. For patch_functional(), one function: `name` is where it lives
    ("torch.nn.functional.softmax"), `old` the function found there, `new` its replacement."""
    name: str  # qualified name in the model ("" for the model itself), or of the function
    old: Union[type, Callable]
    new: Union[type, Callable, str]

    @property
    def replaced(self) -> bool:
        return not isinstance(self.new, str)


class PatchReport(list):
    """The PatchRecords of one patch(), unpatch() or patch_functional() call, in module order
    (patch_functional: in a fixed order of the functions)."""

    @property
    def replaced(self):
        return [r for r in self if r.replaced]

    @property
    def skipped(self):
        return [r for r in self if not r.replaced]

    def __str__(self):
        def qual(cls):
            return f"{cls.__module__}.{cls.__qualname__}"

        lines = []
        for r in self:
            outcome = f"-> {qual(r.new)}" if r.replaced else f"left alone: {r.new}"
            lines.append(f"{r.name or '<model>'} ({qual(r.old)}) {outcome}")
        return "\n".join(lines)


def _parse_ops(ops) -> frozenset:
    if ops is None:
        return OP_FAMILIES
    try:
        names = frozenset([ops] if isinstance(ops, str) else ops)
    except TypeError:
        raise TypeError(f"ops: expected None or an iterable of family names, got {type(ops).__name__}") from None
    unknown = sorted(str(n) for n in names - OP_FAMILIES)
    if unknown:
        raise ValueError(f"ops: unknown {', '.join(unknown)}; expected names from {', '.join(sorted(OP_FAMILIES))}")
    return names


def _own_tensors(module):
    return list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))


def _device_reason(tensors, model_devices) -> Optional[str]:
    """Why the module's tensors (or, for a module without any, the model's) do not say one CUDA
    device; None when they do."""
    if any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors):
        kinds = sorted({type(t).__name__ for t in tensors} - {"Tensor", "Parameter"})
        return f"holds tensor subclasses ({', '.join(kinds)}), which reducekit's operators do not take"
    bad = sorted({str(t.dtype) for t in tensors if t.is_floating_point() and t.dtype not in _FLOAT_DTYPES})
    if bad:
        return f"holds tensors of dtype {', '.join(bad)}; reducekit takes float32, float16, bfloat16, float64"
    if tensors:
        devices = {t.device for t in tensors}
        where = "its tensors are"
    else:
        devices = model_devices
        where = "it holds no tensors, and the model's are"
        if not devices:
            return "it holds no tensors and neither does the model, so its device is unknown"
    if not all(_runs_on(d) for d in devices):
        return f"{where} on {', '.join(sorted(str(d) for d in devices))}; reducekit's operators run on CUDA only"
    if len(devices) > 1:
        return f"{where} on more than one device ({', '.join(sorted(str(d) for d in devices))})"
    return None


def _transformers_reason(module, eps_attr) -> Optional[str]:
    """transformers' RMSNorm layout (one 1-D weight, eps a number, nothing else), or why not."""
    weight = module._parameters.get("weight")
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 1:
        return "expected a 1-D Parameter `weight`, as transformers' RMSNorm classes hold"
    if not isinstance(getattr(module, eps_attr, None), (int, float)):
        return f"expected a number `{eps_attr}`, as transformers' {type(module).__name__} holds"
    extra = [n for n, _ in module.named_parameters(recurse=False) if n != "weight"]
    extra += [n for n, _ in module.named_buffers(recurse=False)] + [n for n, _ in module.named_children()]
    if extra:
        return f"holds more than transformers' {type(module).__name__} does ({', '.join(extra)})"
    return None


def _plan(module, families, model_devices):
    """(family, replacement class) for a module patch() may swap, or (None, reason) for one it
    reports as left alone, or None for a module it does not concern."""
    cls = type(module)
    if "_reducekit_patched_from" in vars(module) or cls in _REDUCEKIT_CLASSES or cls in _swapped_classes.values():
        return None, "already reducekit's"
    if cls in _TORCH_REPLACEMENTS:
        family, replacement = _TORCH_REPLACEMENTS[cls]
    elif cls.__name__ in _TRANSFORMERS_RMS_NORMS and _is_transformers_class(cls):
        mixin, eps_attr = _TRANSFORMERS_RMS_NORMS[cls.__name__]
        family = "rms_norm"
        reason = _transformers_reason(module, eps_attr)
        if reason is not None:
            return None, reason
        replacement = _reducekit_subclass(cls, mixin)
    else:
        for base in _TORCH_REPLACEMENTS:
            if isinstance(module, base):
                return None, (f"a subclass of torch.nn.{base.__name__}; its forward may differ from torch's, "
                              f"so reducekit's would change what it computes")
        if cls.__name__ in _TRANSFORMERS_RMS_NORMS:
            return None, (f"named as transformers' {cls.__name__} but defined in {cls.__module__}; its forward "
                          f"(where it rounds, weight or 1 + weight) cannot be vouched for by the name")
        if cls.__name__.endswith(("RMSNorm", "LayerNorm")) and not cls.__module__.startswith("torch."):
            return None, ("not an RMSNorm class reducekit knows (transformers' Llama, Mistral, Mixtral, Qwen2, "
                          "Qwen3, Phi3, Gemma and T5 families); where it rounds, or whether it scales by weight or "
                          "1 + weight, cannot be told from its attributes")
        return None
    if family not in families:
        return None, f"'{family}' is not in ops"
    if family in ("softmax", "log_softmax") and module.dim is None:
        return None, "dim=None (torch picks a dim by the input's rank); give the module a dim"
    reason = _device_reason(_own_tensors(module), model_devices)
    if reason is not None:
        return None, reason
    return family, replacement


def patch(model: torch.nn.Module, ops: Optional[Iterable[str]] = None, *, dry_run: bool = False) -> PatchReport:
    """Swaps, in place, the modules of `model` (itself included) that reducekit runs for
    reducekit's, keeping each module object and its parameters, buffers, hooks and state.

    ops: the families to swap, from "layer_norm", "rms_norm", "batch_norm", "softmax",
    "log_softmax", "cross_entropy" (None: all). dry_run: change nothing, report what would be.
    Returns a PatchReport: a PatchRecord(name, old class, new class or reason left alone) for
    every module of a kind reducekit knows, in model.named_modules() order. unpatch() undoes it.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    families = _parse_ops(ops)
    model_devices = {t.device for t in list(model.parameters()) + list(model.buffers())}
    report = PatchReport()
    for name, module in model.named_modules():
        plan = _plan(module, families, model_devices)
        if plan is None:
            continue
        family, outcome = plan
        report.append(PatchRecord(name, type(module), outcome))
        if family is not None and not dry_run:
            original = type(module)
            module.__class__ = outcome
            module._reducekit_patched_from = original  # a plain attribute: not in the state dict
    return report


def unpatch(model: torch.nn.Module) -> PatchReport:
    """Gives every module patch() swapped in `model` its original class back (and nothing else
    changes: parameters, buffers and hooks are the module's own throughout). Returns a PatchReport
    of PatchRecord(name, reducekit's class, restored class)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    report = PatchReport()
    for name, module in model.named_modules():
        original = vars(module).get("_reducekit_patched_from")
        if original is None:
            continue
        report.append(PatchRecord(name, type(module), original))
        module.__class__ = original
        del module._reducekit_patched_from
    return report


# ----------------------------------------------------------------------------- patch_functional()
# Each replacement has the signature of the torch.nn.functional function it replaces (so a call
# binds as it would there, and a bad one fails as it would), calls reducekit's function when
# reducekit takes every argument as given, and otherwise calls the function it replaced with the
# same arguments. reducekit's functions are looked up in their modules at each call
# (_softmax.softmax, not a name bound here), so that a test can put spies in their place.

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_MAX_RANK = 8  # reducekit's operators take rank 8 at most (kMaxRank, include/reducekit/tensor.hpp)
_DTYPE_ARGS = (None,) + _FLOAT_DTYPES  # softmax's dtype=: reducekit casts x to it first, as torch


def _takes(x, *others) -> bool:
    """Whether reducekit's operators take x, and the other tensor arguments (None where not given)
    beside it, as torch's function would."""
    # A tensor subclass (DTensor and the like) must reach torch's function, whose
    # __torch_function__ handling it relies on.
    if type(x) not in _PLAIN or x.dtype not in _FLOAT_DTYPES or x.dim() > _MAX_RANK or not _runs_on(x.device):
        return False
    # Autocast would run most of these in float32 (softmax, the norms, the losses); reducekit's
    # operators have no autocast rules and would compute in the input's dtype: leave them to torch.
    if torch.is_autocast_enabled(x.device.type):
        return False
    for t in others:
        if t is not None and (type(t) not in _PLAIN or t.device != x.device):
            return False
    return True


def _floats(*tensors) -> bool:
    """Every tensor given (None: not given) of a float dtype reducekit takes."""
    for t in tensors:
        if t is not None and t.dtype not in _FLOAT_DTYPES:
            return False
    return True


def _norm_params_fit(x, weight, bias=None) -> bool:
    """reducekit's norms take weight and bias in x's dtype, or float32 with 16-bit x, the two alike."""
    allowed = (x.dtype, torch.float32) if x.dtype in _HALF else (x.dtype,)
    for t in (weight, bias):
        if t is not None and t.dtype not in allowed:
            return False
    return weight is None or bias is None or weight.dtype == bias.dtype


def _wrap_softmax(torch_softmax):
    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        # dim=None has torch pick a dim by the rank (deprecated, with a warning), and a str names a
        # dim of a named tensor: torch's. _stacklevel only places that warning.
        if isinstance(dim, int) and dtype in _DTYPE_ARGS and _takes(input):
            return _softmax.softmax(input, dim, dtype)
        return torch_softmax(input, dim, _stacklevel + 1, dtype)  # + 1: the warning names our caller
    return softmax


def _wrap_log_softmax(torch_log_softmax):
    def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
        if isinstance(dim, int) and dtype in _DTYPE_ARGS and _takes(input):  # as softmax
            return _softmax.log_softmax(input, dim, dtype)
        return torch_log_softmax(input, dim, _stacklevel + 1, dtype)
    return log_softmax


def _wrap_layer_norm(torch_layer_norm):
    def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
        if _takes(input, weight, bias) and _norm_params_fit(input, weight, bias):
            return _norm.layer_norm(input, normalized_shape, weight, bias, eps)
        return torch_layer_norm(input, normalized_shape, weight, bias, eps)
    return layer_norm


def _wrap_rms_norm(torch_rms_norm):
    def rms_norm(input, normalized_shape, weight=None, eps=None):
        if _takes(input, weight) and _norm_params_fit(input, weight):
            return _norm.rms_norm(input, normalized_shape, weight, eps)
        return torch_rms_norm(input, normalized_shape, weight, eps)
    return rms_norm


def _wrap_batch_norm(torch_batch_norm):
    def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                   eps=1e-5):
        channel = (running_mean, running_var, weight, bias)
        # reducekit takes rank 2 to 5 and the running statistics both or neither (and needs them
        # outside training); per-channel tensors of any float dtype go through a float copy.
        if _takes(input, *channel) and _floats(*channel) and 2 <= input.dim() <= 5 \
                and (running_mean is None) == (running_var is None) and (training or running_mean is not None):
            return _batch_norm.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
        return torch_batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    return batch_norm


def _wrap_cross_entropy(torch_cross_entropy):
    def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                      reduction="mean", label_smoothing=0.0):
        # size_average and reduce are torch's deprecated spellings of reduction: torch's. Targets
        # as torch tells them apart: int64 class indices, or class probabilities of the input's
        # shape (with ignore_index < 0: torch refuses it for those, with its own error).
        if size_average is None and reduce is None and _takes(input, target, weight) and input.dim() > 0 \
                and _floats(weight) \
                and (target.dtype == torch.int64 and target.shape != input.shape
                     or target.dtype in _FLOAT_DTYPES and target.shape == input.shape and ignore_index < 0):
            return _loss.cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)
        return torch_cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction,
                                   label_smoothing)
    return cross_entropy


# torch.nn.functional name -> the factory of its replacement, in the order patch_functional reports
_FUNCTIONAL = {name: wrap for name, wrap in (
    ("softmax", _wrap_softmax), ("log_softmax", _wrap_log_softmax), ("layer_norm", _wrap_layer_norm),
    ("rms_norm", _wrap_rms_norm), ("batch_norm", _wrap_batch_norm), ("cross_entropy", _wrap_cross_entropy),
) if name in OP_FAMILIES and hasattr(F, name)}
# (name, the function replaced) -> its replacement, made once: torch.compile guards on the
# function's identity, so a function compiled in one block runs without recompiling in the next.
_functional_wrappers = {}


def _functional_wrapper(name: str, found: Callable) -> Callable:
    wrapper = _functional_wrappers.get((name, found))
    if wrapper is None:
        wrapper = _FUNCTIONAL[name](found)
        wrapper.__qualname__ = name
        wrapper.__doc__ = (f"torch.nn.functional.{name} on reducekit.{name} where reducekit takes the call "
                           f"(reducekit.patch_functional); otherwise the function it replaced.")
        _functional_wrappers[(name, found)] = wrapper
    return wrapper


def _settle_compile_table():
    """Has torch.compile's table of torch's own functions made with torch's functions, not the
    replacements. Dynamo makes it once (torch._dynamo.trace_rules.get_torch_obj_rule_map, on
    importing torch._dynamo), by looking the functions up by name ("torch.nn.functional.softmax");
    made while a block runs, it would list the replacements as torch functions, which a graph
    holds unopened: neither their checks nor reducekit's operators traced, the compiled call
    torch's. So it is made before a block replaces anything, and made again after a block during
    which it was remade (torch.distributed.init_process_group clears it). A private table: where
    a torch has none by that name, nothing is done."""
    try:
        from torch._dynamo import trace_rules
        table = trace_rules.get_torch_obj_rule_map()
        if any(wrapper in table for wrapper in _functional_wrappers.values()):
            trace_rules.get_torch_obj_rule_map.cache_clear()
            trace_rules.get_torch_obj_rule_map()
    except (ImportError, AttributeError):
        pass


@contextlib.contextmanager
def patch_functional(ops: Optional[Iterable[str]] = None):
    """Inside the `with` block, torch.nn.functional's softmax, log_softmax, layer_norm, rms_norm,
    batch_norm and cross_entropy (or those `ops` names) are reducekit's where reducekit takes the
    call, and the functions they replaced otherwise; those are put back when the block ends,
    also when an exception ends it.

        with reducekit.patch_functional(ops={"softmax", "layer_norm"}) as report:
            y = F.layer_norm(F.softmax(x, -1), x.shape[-1:])

    A call is reducekit's when every tensor argument is a plain tensor (not a subclass) on the
    input's GPU, the input of a float dtype reducekit takes and of rank 8 at most, autocast is
    off, and the other arguments are ones reducekit's function expresses; otherwise the replaced
    function runs, with the same arguments. Left to torch: softmax/log_softmax with dim=None, a
    named dim or a non-float dtype=; norm weights and biases of another dtype than x's (float32
    with 16-bit x is reducekit's) or of two dtypes; batch_norm of rank other than 2-5, with one
    running statistic, or without them in inference; cross_entropy with size_average or reduce,
    a target neither int64 class indices nor probabilities of the input's shape, or
    probabilities with ignore_index >= 0. A call reducekit takes with wrong arguments (a weight
    of the wrong shape) raises reducekit's error.

    What it changes: attributes of the torch.nn.functional module, for the whole process and
    every thread while the block runs. So torch's modules (nn.LayerNorm and the others, whose
    forwards call F.layer_norm & co.) run reducekit's inside the block too, and code that bound
    a function before it (`from torch.nn.functional import softmax`) keeps torch's.
    torch.softmax, torch.log_softmax and Tensor.softmax are left alone: F.softmax's own body and
    torch's internals call them, and torch.compile treats a Tensor method by its name, so a
    patched method would silently not apply under compile. Blocks nest (an inner one leaves a
    function the outer one replaced as it is; each puts back only what it replaced); blocks in
    threads that overlap without nesting can put torch's functions back while another still
    runs: the results stay right (they are torch's), reducekit just runs fewer of the calls.
    A function torch.compile traces inside the block traces reducekit's operators (the
    replacements are inlined); outside, dynamo's guard on the function sends it to a second
    compilation with torch's.

    ops: the functions to replace, by name, from those above (None: all). Yields a PatchReport:
    a PatchRecord("torch.nn.functional.<name>", the function found, its replacement) for each
    replaced, and a reason for each left as it was (not in ops, already reducekit's).
    """
    names = _parse_ops(ops)
    report = PatchReport()
    replaced = []  # (name, the function found), put back in reverse order
    _settle_compile_table()
    try:
        for name in _FUNCTIONAL:
            found = getattr(F, name)
            where = f"torch.nn.functional.{name}"
            if name not in names:
                report.append(PatchRecord(where, found, f"'{name}' is not in ops"))
            elif found in _functional_wrappers.values():
                report.append(PatchRecord(where, found, "already reducekit's"))
            else:
                wrapper = _functional_wrapper(name, found)
                setattr(F, name, wrapper)
                replaced.append((name, found))
                report.append(PatchRecord(where, found, wrapper))
        yield report
    finally:
        for name, found in reversed(replaced):
            setattr(F, name, found)
        if replaced:
            _settle_compile_table()


__all__ = ["patch", "unpatch", "patch_functional", "PatchRecord", "PatchReport", "OP_FAMILIES"]
