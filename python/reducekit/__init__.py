# SPDX-License-Identifier: Apache-2.0
"""reducekit: memory-bound reductions and normalizations for NVIDIA GPUs, as PyTorch operators.

    import reducekit
    y = reducekit.softmax(x, dim=-1)          # torch.ops.reducekit.softmax underneath
    m = reducekit.nn.LogSoftmax(dim=-1)

The operators live in a compiled library, libreducekit_torch.so, in this folder: `pip install
--no-build-isolation .` puts it there together with _build_info.py (the torch it was compiled
against, checked here before loading it), the developer CMake build writes it into
python/reducekit. REDUCEKIT_TORCH_LIBRARY may point at another copy.
"""
__version__ = "0.1.0"  # the same as include/reducekit/version.hpp (CMake checks)

import os as _os  # noqa: E402

import torch as _torch  # noqa: E402


def _library_path():
    explicit = _os.environ.get("REDUCEKIT_TORCH_LIBRARY")
    if explicit:
        return explicit
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "libreducekit_torch.so")


def _torch_build(version, cuda):
    """What must match between the torch a library was compiled against and the running one:
    torch's C++ ABI changes between minor versions, and its CUDA build (cu130, cu128, cpu)
    decides which CUDA libraries load beside it."""
    major_minor = ".".join(version.split("+")[0].split(".")[:2])
    return major_minor, ("cu" + cuda.replace(".", "") if cuda else "cpu")


def _check_build_torch():
    """A pip-installed package records the torch it was built against (_build_info.py, written
    by CMake); a different torch would fail in load_library with an undefined symbol, so say
    what happened instead. The developer build keeps no record and is not checked."""
    try:
        from . import _build_info
    except ImportError:
        return
    built = _torch_build(_build_info.torch_version, _build_info.torch_cuda)
    running = _torch_build(_torch.__version__, _torch.version.cuda or "")
    if built != running:
        raise ImportError(
            f"reducekit was built against torch {_build_info.torch_version} ({built[1]}), but torch "
            f"{_torch.__version__} ({running[1]}) is running: rebuild it with "
            "`pip install --no-build-isolation .` under this torch"
        )


_path = _library_path()
if not _os.environ.get("REDUCEKIT_TORCH_LIBRARY"):
    _check_build_torch()  # the record describes the library in this folder, not another copy
if not _os.path.exists(_path):
    raise ImportError(
        f"reducekit: compiled operator library not found at {_path}; install the package with "
        "`pip install --no-build-isolation .`, or build it in place with "
        "`cmake -S . -B build && cmake --build build` (both need torch importable)"
    )
_torch.ops.load_library(_path)

from . import _registrations  # noqa: E402,F401  fake kernels and autograd formulas
from ._batch_norm import batch_norm  # noqa: E402
from ._sync_batch_norm import sync_batch_norm  # noqa: E402
from ._softmax import log_softmax, softmax  # noqa: E402
from ._loss import cross_entropy, cross_entropy_with_grad  # noqa: E402
from ._linear_loss import linear_cross_entropy  # noqa: E402
from ._norm import add_layer_norm, add_rms_norm, layer_norm, rms_norm  # noqa: E402
from ._reduce import (amax, amin, argmax, argmin, logsumexp, mean, prod, std, std_mean, sum, var,  # noqa: E402,A004
                      var_mean)
from . import nn  # noqa: E402
from ._patch import PatchRecord, PatchReport, patch, patch_functional, unpatch  # noqa: E402

__all__ = ["softmax", "log_softmax", "nn", "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp",
           "var", "std", "var_mean", "std_mean", "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
           "cross_entropy", "cross_entropy_with_grad", "linear_cross_entropy", "batch_norm", "sync_batch_norm", "patch", "unpatch", "patch_functional", "PatchRecord", "PatchReport"]
