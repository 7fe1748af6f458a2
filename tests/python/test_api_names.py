# SPDX-License-Identifier: Apache-2.0
"""Python API conventions (issue 17): reducekit's functions and its torch.ops.reducekit operators
name their first tensor argument `input`, as torch's own functions do; a function that mirrors a
torch function takes torch's parameter names in torch's order (extras after them); the fake
kernels take their schema's names; and the errors about that argument name it `input`.
conftest.py skips this module, with the reason, where torch, a GPU or a built reducekit is
missing.
"""
import inspect

import pytest
import torch
import torch.nn.functional as F

import reducekit

DEV = "cuda"
ops = torch.ops.reducekit

# Exported names that are not functions of a tensor: the modules, patching and its records.
NOT_TENSOR_FUNCTIONS = {"nn", "patch", "unpatch", "patch_functional", "PatchRecord", "PatchReport"}
# Functions without a torch function of the same meaning to mirror.
NO_TORCH_COUNTERPART = {"add_layer_norm", "add_rms_norm", "cross_entropy_with_grad", "linear_cross_entropy",
                        "sync_batch_norm"}
# linear_cross_entropy is F.cross_entropy(F.linear(hidden, weight, bias), target): its first
# argument is the hidden states, not the logits torch's loss calls input.
FIRST_NOT_INPUT = {"linear_cross_entropy": "hidden"}

# torch's builtins have no Python signature to read: the names their documentation gives,
# (positional, keyword-only), out= left out (reducekit returns new tensors only).
_SOFTMAX = (["input", "dim"], ["dtype"])  # softmax(input, dim, *, dtype=None)
_REDUCE = (["input", "dim", "keepdim"], ["dtype"])  # sum(input, dim, keepdim=False, *, dtype=None)
_EXTREMUM = (["input", "dim", "keepdim"], [])  # amax(input, dim, keepdim=False, *, out=None)
_MOMENT = (["input", "dim"], ["correction", "keepdim"])  # var(input, dim=None, *, correction=1, keepdim=False)
TORCH_BUILTINS = {
    "softmax": _SOFTMAX, "log_softmax": _SOFTMAX,
    "sum": _REDUCE, "mean": _REDUCE, "prod": _REDUCE,
    "amax": _EXTREMUM, "amin": _EXTREMUM, "argmax": _EXTREMUM, "argmin": _EXTREMUM, "logsumexp": _EXTREMUM,
    "var": _MOMENT, "std": _MOMENT, "var_mean": _MOMENT, "std_mean": _MOMENT,
}
# torch's Python functions, whose signatures are read here.
TORCH_PYTHON = {"layer_norm": F.layer_norm, "rms_norm": F.rms_norm, "cross_entropy": F.cross_entropy,
                "batch_norm": F.batch_norm}
# torch's deprecated loss arguments, which reducekit does not take.
NOT_COMPARED = {"size_average", "reduce", "out"}

# The operators whose first argument is the tensor the op works on.
OPS = ["softmax", "log_softmax", "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std",
       "var_mean", "std_mean", "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "batch_norm"]


def _tensor_functions():
    return [name for name in reducekit.__all__ if name not in NOT_TENSOR_FUNCTIONS]


def _names(fn):
    """(positional, keyword-only) parameter names of a Python function."""
    positional, keyword = [], []
    for p in inspect.signature(fn).parameters.values():
        if p.name in NOT_COMPARED:
            continue
        if p.kind == p.KEYWORD_ONLY:
            keyword.append(p.name)
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
    return positional, keyword


def _schema(op):
    return getattr(ops, op).default._schema


# ----------------------------------------------------------------------------- the functions

def test_every_export_is_classified():
    # A new export must say here whether it mirrors torch, so that the checks below cover it.
    classified = NOT_TENSOR_FUNCTIONS | NO_TORCH_COUNTERPART | set(TORCH_BUILTINS) | set(TORCH_PYTHON)
    assert set(reducekit.__all__) == classified, set(reducekit.__all__) ^ classified


@pytest.mark.parametrize("name", _tensor_functions())
def test_first_parameter_is_input(name):
    signature = inspect.signature(getattr(reducekit, name))
    assert list(signature.parameters)[0] == FIRST_NOT_INPUT.get(name, "input"), f"reducekit.{name}{signature}"


@pytest.mark.parametrize("name", ["add_layer_norm", "add_rms_norm"])
def test_fused_residual_forms_take_input_then_residual(name):
    assert list(inspect.signature(getattr(reducekit, name)).parameters)[:2] == ["input", "residual"]


@pytest.mark.parametrize("name", sorted(set(TORCH_BUILTINS) | set(TORCH_PYTHON)))
def test_parameters_follow_torch(name):
    # torch's positional parameters lead, in its order; its keyword-only ones are accepted by
    # name (reducekit's var also takes torch's older positional form, unbiased before keepdim).
    want_positional, want_keyword = TORCH_BUILTINS[name] if name in TORCH_BUILTINS else _names(TORCH_PYTHON[name])
    positional, keyword = _names(getattr(reducekit, name))
    assert positional[:len(want_positional)] == want_positional, (name, positional, want_positional)
    assert set(want_keyword) <= set(positional) | set(keyword), (name, positional + keyword, want_keyword)


# ----------------------------------------------------------------------------- the operators

@pytest.mark.parametrize("op", OPS)
def test_operator_first_argument_is_input(op):
    schema = _schema(op)
    assert schema.arguments[0].name == "input", str(schema)


@pytest.mark.parametrize("op", ["add_layer_norm", "add_rms_norm"])
def test_fused_residual_operators_take_input_then_residual(op):
    assert [a.name for a in _schema(op).arguments[:2]] == ["input", "residual"], str(_schema(op))


def _fakes():
    norm, reduce, bn = reducekit._norm, reducekit._reduce, reducekit._batch_norm
    fakes = {"layer_norm": norm._layer_norm_fake, "rms_norm": norm._rms_norm_fake,
             "add_layer_norm": norm._add_layer_norm_fake, "add_rms_norm": norm._add_rms_norm_fake,
             "layer_norm_backward": norm._layer_norm_backward_fake, "rms_norm_backward": norm._rms_norm_backward_fake,
             "var": reduce._fake_moments, "std": reduce._fake_moments, "var_mean": reduce._fake_moments_pair,
             "std_mean": reduce._fake_moments_pair, "batch_norm": bn._batch_norm_fake}
    for op in ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp"):
        fakes[op] = reduce._fake_reduce(op)
    return fakes


@pytest.mark.parametrize("op", sorted(_fakes()))
def test_fake_kernel_takes_the_schema_names(op):
    # The dispatcher passes positional arguments by place and keyword-only ones by name; the same
    # names keep a fake kernel readable against its schema either way. A fake shared by several
    # ops (_fake_reduce's dtype) may take more, with defaults, which the others never pass.
    want = [(a.name, a.kwarg_only) for a in _schema(op).arguments]
    params = list(inspect.signature(_fakes()[op]).parameters.values())
    got = [(p.name, p.kind == p.KEYWORD_ONLY) for p in params[:len(want)]]
    assert got == want, (op, got, want)
    assert all(p.default is not p.empty for p in params[len(want):]), (op, params)


# ----------------------------------------------------------------------------- calls

def test_input_as_keyword():
    x = torch.randn(8, 64, device=DEV)
    close = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(reducekit.layer_norm(input=x, normalized_shape=[64]),
                               F.layer_norm(input=x, normalized_shape=[64]), **close)
    torch.testing.assert_close(reducekit.softmax(input=x, dim=-1), torch.softmax(x, -1), **close)
    torch.testing.assert_close(reducekit.sum(input=x, dim=1), torch.sum(x, 1), **close)
    # the operators, through the dispatcher's names
    torch.testing.assert_close(ops.layer_norm(input=x, normalized_shape=[64])[0], F.layer_norm(x, [64]), **close)
    torch.testing.assert_close(ops.softmax(input=x, dim=-1), torch.softmax(x, -1), **close)
    torch.testing.assert_close(ops.sum(input=x, dim=[1]), torch.sum(x, 1), **close)


@pytest.mark.parametrize("call", [
    lambda t: reducekit.softmax(t, -1),
    lambda t: reducekit.log_softmax(t, 0),
    lambda t: reducekit.layer_norm(t, [8]),
    lambda t: reducekit.rms_norm(t, [8]),
    lambda t: reducekit.add_rms_norm(t, t, [8]),
    lambda t: reducekit.sum(t, -1),
    lambda t: reducekit.argmax(t, -1),
    lambda t: reducekit.var_mean(t, 0),
], ids=["softmax", "log_softmax", "layer_norm", "rms_norm", "add_rms_norm", "sum", "argmax", "var_mean"])
def test_cpu_error_names_input(call):
    with pytest.raises(RuntimeError, match="input: expected a CUDA tensor"):
        call(torch.randn(4, 8))


@pytest.mark.parametrize("call", [
    lambda t: reducekit.softmax(t, -1),
    lambda t: reducekit.sum(t, -1),
    lambda t: reducekit.layer_norm(t, [2]),
    lambda t: reducekit.add_rms_norm(t, t, [2]),
], ids=["softmax", "sum", "layer_norm", "add_rms_norm"])
def test_rank_error_names_input(call):
    # the norms' outputs are made like input: its check comes first, so the error names it
    with pytest.raises(RuntimeError, match="input: rank 9 exceeds 8"):
        call(torch.randn([1] * 8 + [2], device=DEV))
