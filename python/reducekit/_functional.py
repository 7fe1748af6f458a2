"""Functional API mirroring torch's signatures."""
import torch

from ._dispatch import eager

_ops = torch.ops.reducekit

_softmax = eager(_ops.softmax)
_log_softmax = eager(_ops.log_softmax)


def softmax(x: torch.Tensor, dim: int = -1, dtype: torch.dtype = None) -> torch.Tensor:
    """torch.softmax(x, dim, dtype) on reducekit's kernels (fp32 accumulation, deterministic)."""
    if dtype is not None:
        x = x.to(dtype)
    return _softmax(x, dim)


def log_softmax(x: torch.Tensor, dim: int = -1, dtype: torch.dtype = None) -> torch.Tensor:
    """torch.log_softmax(x, dim, dtype) on reducekit's kernels."""
    if dtype is not None:
        x = x.to(dtype)
    return _log_softmax(x, dim)
