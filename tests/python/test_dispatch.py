# SPDX-License-Identifier: Apache-2.0
"""How a call reaches the kernels: every differentiable op's autograd is a C++ kernel at the
Autograd key (python/csrc/softmax_ops.cpp, norm_autograd.cpp, batch_norm_ops.cpp, reduce_autograd.cpp),
so the functional API calls the ops as they are, with no Python kernel in front and no route
around the dispatcher; a call that needs no gradient gives the same bits as one that does."""
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import reducekit
from reducekit import _entry

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


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_backward_node(log):
    # softmax's autograd is a hand-made node (softmax_ops.cpp): what a Function gave for free must
    # still hold: the gradient, the saved output's checks, retain_graph, hooks, compiled autograd.
    f, ref = (reducekit.log_softmax, torch.log_softmax) if log else (reducekit.softmax, torch.softmax)
    x = _x(32, 1000).requires_grad_()
    dy = _x(32, 1000)
    y = f(x, -1)
    assert y.grad_fn.name() == ("reducekit::LogSoftmaxBackward" if log else "reducekit::SoftmaxBackward")
    assert y.grad_fn.next_functions[0][0].variable is x
    seen = []
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: seen.append(grad_inputs[0].shape))
    (gx,) = torch.autograd.grad(y, x, dy, retain_graph=True)
    assert seen == [x.shape]
    xr = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(ref(xr, -1), xr, dy)
    torch.testing.assert_close(gx, want)
    _same(torch.autograd.grad(y, x, dy)[0], gx)  # retained: the same again, then freed
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        torch.autograd.grad(y, x, dy)
    y = f(x, -1)
    y.mul_(2)  # y is saved for backward: modifying it in place is caught, as with torch's ops
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x.detach(), dy)
        with pytest.raises(RuntimeError, match="forward-mode AD is not supported"):
            f(dual, -1)
    # compiled autograd traces the node (compiled_args, apply_with_saved)
    import torch._dynamo.compiled_autograd as compiled_autograd
    torch._dynamo.reset()
    xc = x.detach().clone().requires_grad_()
    with compiled_autograd._enable(torch.compile(backend="eager")):
        f(xc, -1).backward(dy)
    torch._dynamo.reset()
    _same(xc.grad, gx)


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
        reducekit.softmax(x, -1)  # the eager entries' calls too
        reducekit.layer_norm(x.clone().requires_grad_(), [8])
        reducekit.var_mean(x, 1)
    ours = [s for s in seen if s.startswith("reducekit.")]  # x.clone() is seen too
    assert ours == ["reducekit.sum.default"] * 2 + ["reducekit.softmax.default", "reducekit.layer_norm.default",
                                                    "reducekit.var_mean.default"], seen
    with torch.profiler.profile() as prof:
        reducekit.mean(x, -1)
    assert any(e.name == "reducekit::mean" for e in prof.events())


@pytest.mark.parametrize("requires_grad", [False, True])
def test_cpu_input_still_gets_the_clear_error(requires_grad):
    with pytest.raises(RuntimeError, match="input: expected a CUDA tensor"):
        reducekit.sum(torch.randn(4, 8, requires_grad=requires_grad), -1)


# ----------------------------------------------------------------------------- eager entries

def test_eager_entries_are_built():
    # Without them every eager call pays torch.ops' generic entry (python/csrc/eager_entry.cpp).
    assert _entry.eager is not None, "reducekit was built without reducekit._eager (no Python headers?)"


def _entry_calls(x, w, b):
    """(eager entry call, the op's call as torch.ops) pairs that must give the same tensors."""
    n = [x.shape[-1]]
    e = _entry.eager
    calls = [
        (lambda: e.softmax(x, -1), lambda: ops.softmax(x, -1)),
        (lambda: e.log_softmax(x, 0), lambda: ops.log_softmax(x, 0)),
        (lambda: e.layer_norm(x, n, w, b, 1e-5), lambda: ops.layer_norm(x, n, w, b, 1e-5)[0]),
        (lambda: e.layer_norm(x, tuple(n), None, None, 1e-3), lambda: ops.layer_norm(x, n, None, None, 1e-3)[0]),
        (lambda: e.rms_norm(x, n, w, 1e-6, None), lambda: ops.rms_norm(x, n, w, 1e-6, None)[0]),
        (lambda: e.rms_norm(x, n, None, 1e-6, b), lambda: ops.rms_norm(x, n, None, 1e-6, b)[0]),
        (lambda: e.argmax(x, 1, False), lambda: ops.argmax(x, 1, False)),
        (lambda: e.argmin(x, None, True), lambda: ops.argmin(x, None, True)),
    ]
    for name in ("sum", "mean", "prod", "amax", "amin", "logsumexp"):
        calls.append((lambda name=name: getattr(e, name)(x, [1], False), lambda name=name: getattr(ops, name)(x, [1], False)))
    calls.append((lambda: e.sum(x, None, True), lambda: ops.sum(x, None, True)))
    for name in ("var", "std", "var_mean", "std_mean"):
        calls.append((lambda name=name: getattr(e, name)(x, [0], 0.0, True),
                      lambda name=name: getattr(ops, name)(x, [0], 0.0, True)))
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_eager_entries_give_the_ops_results_and_gradients(dtype):
    x = _x(64, 1000, dtype=dtype)
    w, b = torch.nn.Parameter(_x(1000, dtype=dtype)), _x(1000, dtype=dtype)
    for entry, op in _entry_calls(x, w.detach(), b):
        _same(entry(), op())
    xg = x[:, :8].clone().requires_grad_()  # prod's gradient stays finite over 8 values
    wg = w[:8].detach().clone().requires_grad_()
    for entry, op in _entry_calls(xg, wg, b[:8]):
        y, want = entry(), op()
        y, want = (y[0], want[0]) if isinstance(y, tuple) else (y, want)
        if y.dtype == torch.int64:  # argmax / argmin: no gradient
            assert y.grad_fn is None and torch.equal(y, want)
            continue
        assert y.grad_fn is not None
        g = torch.randn_like(y)
        _same(torch.autograd.grad(y, (xg, wg), g, allow_unused=True, materialize_grads=True),
              torch.autograd.grad(want, (xg, wg), g, allow_unused=True, materialize_grads=True))


class _Tagged(torch.Tensor):
    """A tensor subclass (torch's default __torch_function__ keeps it on outputs)."""


def test_eager_entries_leave_other_calls_to_torch_ops():
    e = _entry.eager
    x = _x(4, 8)
    assert e.softmax(x, 1.0) is NotImplemented  # not an int dim
    assert e.softmax([1.0], 0) is NotImplemented  # not a tensor
    assert e.softmax(x) is NotImplemented  # too few arguments
    assert e.layer_norm(x, [8.0], None, None, 1e-5) is NotImplemented
    assert e.layer_norm(x, [8], None, None, 1) is NotImplemented  # eps not a float
    assert e.rms_norm(x, [8], [1.0] * 8, 1e-6, None) is NotImplemented
    assert e.sum(x, [1], 1) is NotImplemented  # keepdim not a bool
    assert e.var(x, [1], 1, False) is NotImplemented  # correction not a float
    assert e.argmax(x, [1], False) is NotImplemented
    tagged = x.as_subclass(_Tagged)
    assert e.softmax(tagged, -1) is NotImplemented
    assert type(reducekit.softmax(tagged, -1)) is _Tagged  # through torch.ops and __torch_function__
    assert type(reducekit.layer_norm(tagged, [8])) is _Tagged

    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Record():
        assert e.softmax(x, -1) is NotImplemented
        reducekit.softmax(x, -1)
        reducekit.rms_norm(x, [8])
    assert any("softmax" in s for s in seen) and any("rms_norm" in s for s in seen), seen


def test_eager_entries_keep_errors_and_compile():
    x = _x(4, 8)
    with pytest.raises(IndexError, match="Dimension out of range"):
        reducekit.log_softmax(x, 2)
    with pytest.raises(RuntimeError, match="input: expected a CUDA tensor"):
        reducekit.softmax(x.cpu(), -1)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        reducekit.rms_norm(x, [7])
    compiled = torch.compile(lambda t: reducekit.softmax(reducekit.layer_norm(t, [8]), -1), fullgraph=True)
    _same(compiled(x), reducekit.softmax(reducekit.layer_norm(x, [8]), -1))
