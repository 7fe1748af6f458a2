# SPDX-License-Identifier: Apache-2.0
"""Functional API mirroring torch's signatures."""
import torch

from ._checks import check_dtype, wrap_dim
from ._entry import compiling, eager

# The ops are called as they are: their autograd is C++ (python/csrc/softmax_ops.cpp), so no Python
# kernel stands in front of a call.
_ops = torch.ops.reducekit


def _rowwise(op, name: str, input: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    if dtype is not None:
        check_dtype(dtype, f"{name} computes in")  # before the cast, which would make input the culprit
    # torch's IndexError, raised here also while torch.compile traces (dynamo turns the fake
    # kernel's into a TorchRuntimeError)
    wrap_dim(dim, input.dim())
    if dtype is not None:
        input = input.to(dtype)
    return op(input, dim)


def softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype = None) -> torch.Tensor:
    """torch.softmax(input, dim, dtype) on reducekit's kernels (fp32 accumulation, deterministic)."""
    if dtype is None and eager is not None and not compiling():
        y = eager.softmax(input, dim)
        if y is not NotImplemented:
            return y
    return _rowwise(_ops.softmax, "softmax", input, dim, dtype)


def log_softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype = None) -> torch.Tensor:
    """torch.log_softmax(input, dim, dtype) on reducekit's kernels."""
    if dtype is None and eager is not None and not compiling():
        y = eager.log_softmax(input, dim)
        if y is not NotImplemented:
            return y
    return _rowwise(_ops.log_softmax, "log_softmax", input, dim, dtype)
