# SPDX-License-Identifier: Apache-2.0
"""How a call reaches the kernels: every differentiable op's autograd is a C++ kernel at the
Autograd key (python/csrc/softmax_ops.cpp, norm_autograd.cpp, batch_norm_ops.cpp, reduce_autograd.cpp),
so the functional API calls the ops as they are, with no Python kernel in front and no route
around the dispatcher; a call that needs no gradient gives the same bits as one that does."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import reducekit

ops = torch.ops.reducekit

REDUCTIONS = ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std", "var_mean",
              "std_mean"]
C_AUTOGRAD = REDUCTIONS + ["softmax", "log_softmax", "layer_norm", "add_layer_norm", "rms_norm", "add_rms_norm",
                           "batch_norm"]


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


@pytest.mark.parametrize("op", C_AUTOGRAD)
def test_autograd_kernel_is_cpp(op):
    name = f"reducekit::{op}"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Autograd")
    # torch.library.register_autograd's kernel is boxed only, registered from torch/library.py; a
    # C++ one is unboxed, registered from its source file.
    lines = [line for line in torch._C._dispatch_dump(name).splitlines() if line.startswith("Autograd")]
    assert len(lines) == 1 and "unboxed" in lines[0] and "library.py" not in lines[0], lines


def _same(a, b):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for p, q in zip(a, b):
        assert p.dtype == q.dtype and p.shape == q.shape
        assert torch.equal(p, q)


def _calls():
    """(functional form, the op called as the functional form calls it) pairs."""
    return [
        (lambda t: reducekit.sum(t, 1, dtype=torch.float32), lambda t: ops.sum(t, [1], False, dtype=torch.float32)),
        (lambda t: reducekit.mean(t, 0, keepdim=True), lambda t: ops.mean(t, [0], True)),
        (lambda t: reducekit.prod(t[:, :8], 1), lambda t: ops.prod(t[:, :8], [1], False)),
        (lambda t: reducekit.amax(t, 1), lambda t: ops.amax(t, [1], False)),
        (lambda t: reducekit.amin(t), lambda t: ops.amin(t, None, False)),
        (lambda t: reducekit.argmax(t, 1), lambda t: ops.argmax(t, 1, False)),
        (lambda t: reducekit.logsumexp(t, 1), lambda t: ops.logsumexp(t, [1], False)),
        (lambda t: reducekit.var(t, 1), lambda t: ops.var(t, [1], 1.0, False)),
        (lambda t: reducekit.std(t, 0, correction=0), lambda t: ops.std(t, [0], 0.0, False)),
        (lambda t: reducekit.var_mean(t, 1), lambda t: ops.var_mean(t, [1], 1.0, False)),
        (lambda t: reducekit.std_mean(t, None), lambda t: ops.std_mean(t, None, 1.0, False)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grad_and_no_grad_calls_agree(dtype):
    # The Autograd kernel goes below autograd at once when there is nothing to record, and through
    # a Function otherwise: the same kernel either way, and in inference mode (no Autograd key).
    x = _x(64, 1000, dtype=dtype)
    xg = x.clone().requires_grad_()
    for functional, op in _calls():
        want = op(x)
        _same(functional(x), want)
        _same(functional(xg), want)
        with torch.no_grad():
            _same(functional(xg), want)
        with torch.inference_mode():
            _same(functional(x), want)


def test_gradients_flow_where_they_should():
    x = _x(16, 100).requires_grad_()
    y = reducekit.logsumexp(x, -1)
    assert y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None
    v, m = reducekit.var_mean(x, 0)
    assert v.grad_fn is not None and m.grad_fn is not None
    assert reducekit.argmax(x, -1).grad_fn is None  # indices: no gradient
    with torch.no_grad():
        assert reducekit.logsumexp(x, -1).grad_fn is None
    assert reducekit.sum(x.detach(), -1).grad_fn is None


def test_modes_and_the_profiler_see_every_call():
    # No call skips the dispatcher: a dispatch mode and the profiler see the op, grad or no grad.
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x = _x(4, 8)
    with Record():
        reducekit.sum(x, -1)
        reducekit.sum(x.clone().requires_grad_(), -1)
    assert seen.count("reducekit.sum.default") == 2, seen
    with torch.profiler.profile() as prof:
        reducekit.mean(x, -1)
    assert any(e.name == "reducekit::mean" for e in prof.events())


@pytest.mark.parametrize("requires_grad", [False, True])
def test_cpu_input_still_gets_the_clear_error(requires_grad):
    with pytest.raises(RuntimeError, match="input: expected a CUDA tensor"):
        reducekit.sum(torch.randn(4, 8, requires_grad=requires_grad), -1)
