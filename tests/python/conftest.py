# SPDX-License-Identifier: Apache-2.0
"""pytest setup for reducekit's Python tests.

Tests import reducekit from <repo>/python (or from $REDUCEKIT_PYTHON_PATH, to test another
build); with REDUCEKIT_TEST_INSTALLED=1 they test the reducekit that `pip install` put on the
path instead, and leave sys.path alone. Every test module here needs torch, a CUDA device and a
built reducekit; when one is missing, each module is reported as skipped with the reason,
instead of failing at import.
"""
import fcntl
import functools
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if os.environ.get("REDUCEKIT_TEST_INSTALLED") == "1":
    # The folder holding the installed package (found without importing it, so torch loads no
    # sooner); test_bad_inputs' child processes put it first on their path too.
    _spec = importlib.util.find_spec("reducekit")
    PACKAGE_PATH = (str(Path(_spec.origin).parents[1]) if _spec is not None and _spec.origin
                    else "the installed packages (none found)")
else:
    PACKAGE_PATH = os.environ.get("REDUCEKIT_PYTHON_PATH") or str(REPO / "python")
    if PACKAGE_PATH not in sys.path:
        sys.path.insert(0, PACKAGE_PATH)


@functools.lru_cache(maxsize=None)
def missing_requirement():
    """Why the GPU tests cannot run here, or None when they can."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return f"CUDA is not available (torch {torch.__version__} sees no GPU)"
    try:
        import reducekit
    except ImportError as exc:
        return f"reducekit is not built: 'import reducekit' from {PACKAGE_PATH} failed: {exc}"
    if getattr(reducekit, "__file__", None) is None:
        # a folder without __init__.py imports as an empty namespace package
        return f"reducekit is not built: {PACKAGE_PATH}/reducekit has no __init__.py"
    if not hasattr(torch.ops, "reducekit") or not hasattr(torch.ops.reducekit, "softmax"):
        return "reducekit imported, but torch.ops.reducekit.softmax is not registered"
    return None


class _SkippedModule(pytest.Module):
    """Stands in for a test module that cannot run: never imports it, reports it skipped."""

    def collect(self):
        pytest.skip(f"{self.path.name}: {missing_requirement()}")


def pytest_pycollect_makemodule(module_path, parent):
    if missing_requirement() is not None:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "large: needs several GB of GPU memory (runs by default; "
                                       "deselect with -m 'not large')")


def pytest_report_header(config):
    reason = missing_requirement()
    if reason:
        return [f"reducekit GPU tests: SKIPPED: {reason}"]
    import torch
    import reducekit
    return [f"reducekit GPU tests: {Path(reducekit.__file__).parent}, torch {torch.__version__}, "
            f"{torch.cuda.get_device_name(0)}"]


@pytest.fixture(autouse=True)
def _seeded():
    """Every test draws the same random data, whichever subset runs."""
    import torch
    torch.manual_seed(1234)
    yield


@pytest.fixture(autouse=True)
def _one_large_test_at_a_time(request):
    """Tests marked large run one at a time across the pytest processes that scripts/test.sh
    starts side by side (a file lock), and hand their cached GPU memory back when done: their
    tensors of several GB each would not fit on one GPU together."""
    if request.node.get_closest_marker("large") is None:
        yield
        return
    import torch
    with open(os.path.join(tempfile.gettempdir(), "reducekit-large-tests.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            torch.cuda.empty_cache()
            yield
        finally:
            torch.cuda.empty_cache()
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def exact_float32_gemms():
    """float32 matmuls without TF32 for the test (its oracle is float64), restored after."""
    import torch
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = allowed
