# SPDX-License-Identifier: Apache-2.0
"""Eager calls of the reductions that skip the Python autograd kernel where no gradient can flow.

torch.library.register_autograd puts a Python kernel in front of every call of an op, grad or
no grad: it checks the inputs, then redispatches below autograd. That costs about as much host
time as the rest of the call, which an eager caller of a small op pays on every step (run 22,
bench/host_overhead.py on the H200's host: torch.ops.reducekit.sum 25 us a call, reducekit.sum
through this route 11 us, torch.sum 13 us).

The functional API therefore calls the CUDA kernel directly when that kernel is all the ordinary
call would reach: eager mode (not torch.compile's tracing, not torch.jit.trace), no Python
dispatch, torch-function or functorch transform active, no forward-mode AD level open, no
profiler running (it records ops at the top-level dispatch the direct call skips), and every
tensor argument a plain CUDA tensor (torch.Tensor or nn.Parameter, so no fake, functional or
other subclass tensor) that needs no gradient. Any other call takes the ordinary route. Results
are the same kernels' either way.

softmax, log_softmax and the norms do not take this route: their autograd is C++
(python/csrc/ops.cpp, norm_autograd.cpp), and the op called as it is costs less host time than
this route (run 23: torch.ops.reducekit.softmax 9.9 us a call, through this route 13.5 us).
"""
import torch
from torch.autograd import forward_ad as _forward_ad

_C = torch._C
_CUDA_KEYS = _C.DispatchKeySet(_C.DispatchKey.CUDA)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def takes_direct_route(args) -> bool:
    """True when a call with these positional arguments may go straight to the CUDA kernel."""
    if _C._len_torch_dispatch_stack() or _C._is_torch_function_mode_enabled() or \
            _C._are_functorch_transforms_active() or _C._get_tracing_state() is not None or \
            _forward_ad._current_level >= 0 or _C._autograd._profiler_enabled():
        return False
    grad = _C.is_grad_enabled()
    for a in args:
        if type(a) in _PLAIN:
            if not a.is_cuda or (grad and a.requires_grad):
                return False
        elif isinstance(a, torch.Tensor):
            return False
    return True


def eager(packet):
    """torch.ops.reducekit.<op> as a function taking the direct route where it may (see above)."""
    handle = packet.default._handle

    def call(*args, **kwargs):
        # is_compiling first: under torch.compile the check short-circuits and the ordinary op is traced.
        if not torch.compiler.is_compiling() and takes_direct_route(args):
            return handle.redispatch_boxed(_CUDA_KEYS, *args, **kwargs)
        return packet(*args, **kwargs)

    call.__name__ = call.__qualname__ = packet.__name__.split(".")[-1]
    return call
