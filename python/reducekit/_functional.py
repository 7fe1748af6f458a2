"""Functional API mirroring torch's signatures."""
import torch

# The ops themselves: their autograd is C++ (python/csrc/ops.cpp), which costs less host time a
# call than the reductions' direct route (reducekit/_dispatch.py) would save.
_softmax = torch.ops.reducekit.softmax
_log_softmax = torch.ops.reducekit.log_softmax


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
