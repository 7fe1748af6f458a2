# SPDX-License-Identifier: Apache-2.0
"""The functional API's direct route (reducekit/_dispatch.py): taken exactly where no gradient,
mode or tensor subclass could see the call, and giving the ordinary route's results bit for bit."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import reducekit
from reducekit._dispatch import takes_direct_route

ops = torch.ops.reducekit


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def test_plain_cuda_tensors_take_it():
    x = _x(4, 8)
    w = torch.nn.Parameter(_x(8))
    assert takes_direct_route((x, -1))
    with torch.no_grad():
        assert takes_direct_route((x, [8], w, None, 1e-5))  # a Parameter under no_grad
    with torch.inference_mode():
        assert takes_direct_route((x, -1))


@pytest.mark.parametrize("case", ["requires_grad", "parameter_with_grad", "cpu", "meta", "fake", "vmap",
                                  "dispatch_mode", "function_mode", "jit_trace", "forward_ad", "profiler"])
def test_other_calls_take_the_ordinary_route(case):
    x = _x(4, 8)
    if case == "requires_grad":
        assert not takes_direct_route((x.requires_grad_(), -1))
    elif case == "parameter_with_grad":
        assert not takes_direct_route((x, [8], torch.nn.Parameter(_x(8)), None, 1e-5))
    elif case == "cpu":
        assert not takes_direct_route((x.cpu(), -1))
    elif case == "meta":
        assert not takes_direct_route((x.to("meta"), -1))
    elif case == "fake":
        with FakeTensorMode():
            assert not takes_direct_route((torch.empty(4, 8, device="cuda"), -1))
    elif case == "vmap":
        seen = []
        torch.vmap(lambda row: seen.append(takes_direct_route((row, -1))) or row)(x)
        assert seen == [False]
    elif case == "dispatch_mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Passthrough(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))
        with Passthrough():
            assert not takes_direct_route((x, -1))
    elif case == "jit_trace":
        seen = []
        torch.jit.trace(lambda t: seen.append(takes_direct_route((t, -1))) or t * 2, (x,), check_trace=False)
        assert seen == [False]
    elif case == "forward_ad":
        import torch.autograd.forward_ad as fwAD
        with fwAD.dual_level():
            dual = fwAD.make_dual(x, torch.ones_like(x))
            assert not takes_direct_route((dual, -1))
    elif case == "profiler":
        with torch.profiler.profile():
            assert not takes_direct_route((x, -1))
    elif case == "function_mode":
        from torch.overrides import TorchFunctionMode

        class Passthrough(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))
        with Passthrough():
            assert not takes_direct_route((x, -1))


def _same(a, b):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for p, q in zip(a, b):
        assert p.dtype == q.dtype and p.shape == q.shape
        assert torch.equal(p, q)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_both_routes_agree(dtype):
    x = _x(64, 1000, dtype=dtype)
    cases = [
        (reducekit.sum(x, 1, dtype=torch.float32), ops.sum(x, [1], False, dtype=torch.float32)),
        (reducekit.mean(x, 0, keepdim=True), ops.mean(x, [0], True)),
        (reducekit.prod(x[:, :8], 1), ops.prod(x[:, :8], [1], False)),
        (reducekit.amax(x, 1), ops.amax(x, [1], False)),
        (reducekit.amin(x), ops.amin(x, None, False)),
        (reducekit.logsumexp(x, 1), ops.logsumexp(x, [1], False)),
        (reducekit.var(x, 1), ops.var(x, [1], 1.0, False)),
        (reducekit.std(x, 0, correction=0), ops.std(x, [0], 0.0, False)),
        (reducekit.var_mean(x, 1), ops.var_mean(x, [1], 1.0, False)),
        (reducekit.std_mean(x, None), ops.std_mean(x, None, 1.0, False)),
    ]
    for direct, ordinary in cases:
        _same(direct, ordinary)


def test_gradients_still_flow():
    x = _x(16, 100).requires_grad_()
    y = reducekit.logsumexp(x, -1)
    assert y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None
    with torch.no_grad():
        assert reducekit.logsumexp(x, -1).grad_fn is None


def test_cpu_input_still_gets_the_clear_error():
    with pytest.raises(RuntimeError, match="x: expected a CUDA tensor"):
        reducekit.sum(torch.randn(4, 8), -1)
