# SPDX-License-Identifier: Apache-2.0
"""Fake (meta) kernels for torch.ops.reducekit.softmax & co.

Fake kernels let torch.compile trace the ops without running them: every op returns a fresh
contiguous tensor of its first input's shape and dtype, exactly as the CUDA kernels do, and
refuses a dim out of range as they do.
"""
import torch

from ._checks import wrap_dim


def _like_first(first, *rest):
    """The output, after the dim check the CUDA op makes (its last argument), so that a bad dim
    fails while tracing as it would when run: torch's IndexError."""
    wrap_dim(rest[-1], first.dim())
    return torch.empty(first.shape, dtype=first.dtype, device=first.device)


for _name in ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward"):
    torch.library.register_fake(f"reducekit::{_name}")(_like_first)

# Their autograd is registered in C++ (python/csrc/softmax_ops.cpp, SoftmaxAutograd).
