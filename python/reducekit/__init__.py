# SPDX-License-Identifier: Apache-2.0
"""reducekit: memory-bound reductions and normalizations for NVIDIA GPUs, as PyTorch operators.

    import reducekit
    y = reducekit.softmax(x, dim=-1)          # torch.ops.reducekit.softmax underneath
    m = reducekit.nn.LogSoftmax(dim=-1)

The operators live in a compiled library (libreducekit_torch.so, built by CMake into this
folder); REDUCEKIT_TORCH_LIBRARY may point at another copy.
"""
__version__ = "0.1.0"  # the same as include/reducekit/version.hpp (CMake checks)

import os as _os  # noqa: E402

import torch as _torch  # noqa: E402


def _library_path():
    explicit = _os.environ.get("REDUCEKIT_TORCH_LIBRARY")
    if explicit:
        return explicit
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "libreducekit_torch.so")


_path = _library_path()
if not _os.path.exists(_path):
    raise ImportError(
        f"reducekit: compiled operator library not found at {_path}; build it with "
        "`cmake -S . -B build && cmake --build build` (needs torch importable at configure time)"
    )
_torch.ops.load_library(_path)

from . import _registrations  # noqa: E402,F401  fake kernels and autograd formulas
from ._functional import log_softmax, softmax  # noqa: E402
from ._loss import cross_entropy  # noqa: E402
from ._norm import add_layer_norm, add_rms_norm, layer_norm, rms_norm  # noqa: E402
from ._reduce import (amax, amin, argmax, argmin, logsumexp, mean, prod, std, std_mean, sum, var,  # noqa: E402,A004
                      var_mean)
from . import nn  # noqa: E402

__all__ = ["softmax", "log_softmax", "nn", "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp",
           "var", "std", "var_mean", "std_mean", "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
           "cross_entropy"]
