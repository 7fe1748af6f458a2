# SPDX-License-Identifier: Apache-2.0
"""The eager entries (python/csrc/eager_entry.cpp): the functional API's plain eager calls go
straight to the dispatcher through them, skipping torch.ops' generic argument matching and boxed
call (about 2 us a call). `eager` is None where the build had no Python headers; `compiling()` is
true while torch.compile traces, when every call goes through torch.ops, which it understands.
Each entry returns NotImplemented for a call it does not take (a tensor subclass, an active
__torch_function__ mode, another argument type), and the wrapper then calls torch.ops. The
wrappers test this inline rather than through one shared function: a Python call more is
0.1-0.3 us a call (meta tensors, this repository's CPU check)."""
import torch

try:
    from . import _eager as eager
except ImportError:
    eager = None

compiling = torch.compiler.is_compiling
