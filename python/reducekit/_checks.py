# SPDX-License-Identifier: Apache-2.0
"""Argument checks the Python layer and the fake kernels make in torch's words and exception
types, so that a bad call fails alike on CUDA tensors, on meta tensors and while tracing. The
CUDA ops make the same checks in C++ (python/csrc/softmax_ops.cpp, reduce_ops.cpp).
"""
import torch

# What reducekit computes in and returns.
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def wrap_dim(dim, rank):
    """dim in [0, rank), as torch wraps it (a rank-0 tensor takes 0 and -1); out of range, torch's
    IndexError and message."""
    bound = max(rank, 1)
    if dim < -bound or dim >= bound:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], but got {dim})")
    return dim % bound


def check_dtype(dtype, what, argument="dtype"):
    """A dtype argument (None: not given) reducekit takes, named `argument`; `what` says what the op
    does with it ("softmax computes in"). Without this check the error would name the tensor made
    from it."""
    if dtype is not None and dtype not in FLOAT_DTYPES:
        name = str(dtype).removeprefix("torch.")
        raise RuntimeError(f"{argument}: {name} is not supported; {what} float32, float64, float16 or bfloat16")
