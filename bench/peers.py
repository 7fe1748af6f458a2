# SPDX-License-Identifier: Apache-2.0
"""Loading the optional implementations: reducekit itself and the seed Triton peers,
plus the builder for torch.compile peers (fresh compile per shape)."""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Tuple

from registry import Impl, NotApplicable

REPO = Path(__file__).resolve().parents[1]


def short_error(exc: BaseException, limit: int = 200) -> str:
    """One line for a table note: the type and the first line of the message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:limit] if lines else ''}"


def default_seed_triton_path() -> Optional[Path]:
    """--seed-triton's default: $REDUCEKIT_SEED_TRITON, <repo>/.peers/, then ../shared/peers/."""
    env = os.environ.get("REDUCEKIT_SEED_TRITON")
    candidates = [Path(env)] if env else []
    candidates += [REPO / ".peers" / "seed_triton.py", REPO.parent / "shared" / "peers" / "seed_triton.py"]
    for path in candidates:
        if path.is_file():
            return path
    return None


def load_seed_triton(path: Optional[Path]):
    """Returns (module or None, note). Loaded by path: the library never depends on it."""
    if path is None:
        return None, ("seed-triton: skipped, no seed_triton.py found (pass --seed-triton PATH "
                      "or set REDUCEKIT_SEED_TRITON)")
    path = Path(path)
    if not path.is_file():
        return None, f"seed-triton: skipped, {path} does not exist"
    try:
        spec = importlib.util.spec_from_file_location("seed_triton", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken peer must not stop the benchmark
        return None, f"seed-triton: skipped, loading {path} failed: {short_error(exc)}"
    return module, f"seed-triton: {path}"


def seed_function(ctx, name: str) -> Callable:
    """seed_triton.<name> from the loaded seed module, or NotApplicable saying why it is missing."""
    fn = getattr(ctx.seed, name, None) if ctx.seed is not None else None
    if fn is None:
        raise NotApplicable("seed_triton.py not loaded" if ctx.seed is None else f"no seed_triton.{name}")
    return fn


def build_seed_sum_all(ctx, inputs) -> Impl:
    """The seed's block reduce + float32 atomic add over every element: a peer for sum over all
    dims (its result is float32 whatever the input dtype, and not deterministic)."""
    return Impl(seed_function(ctx, "sum_all"))


def _installed_copy_hint() -> str:
    """Where the in-tree package is not built but scripts/test.sh installed one (build/site)."""
    site = REPO / "build" / "site"
    if "REDUCEKIT_PYTHON_PATH" in os.environ or not (site / "reducekit").is_dir():
        return ""
    return f"; scripts/test.sh installed a copy: REDUCEKIT_PYTHON_PATH={site}"


def load_reducekit() -> Tuple[object, str]:
    """Imports reducekit from <repo>/python (or $REDUCEKIT_PYTHON_PATH). Returns (module or None, note).

    The package raises ImportError when its compiled op library is missing. An empty
    python/reducekit folder imports as a namespace package with no ops: treat that as not built too.
    """
    path = os.environ.get("REDUCEKIT_PYTHON_PATH") or str(REPO / "python")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        import reducekit  # noqa: F401
        import torch
    except ImportError as exc:
        return None, f"reducekit: not built (import reducekit failed: {exc}){_installed_copy_hint()}"
    if getattr(reducekit, "__file__", None) is None:
        return None, f"reducekit: not built ({path}/reducekit has no __init__.py){_installed_copy_hint()}"
    if not hasattr(torch.ops, "reducekit"):
        return None, "reducekit: imported, but no torch.ops.reducekit namespace"
    return reducekit, f"reducekit: {Path(reducekit.__file__).parent}"


def compile_fresh(fn: Callable, warm_args: tuple, warm_calls: int = 3) -> Tuple[Callable, float]:
    """torch.compile(fn) for exactly one shape: static, whole graph, warmed up.

    Dynamo caches compiled code on fn's code object, so compiling the same function
    for a second shape would recompile it with dynamic shapes (slower kernels) and
    after a few shapes hit the recompile limit and fall back to eager. Resetting
    dynamo first makes every shape a first compile, as a user with one shape gets.
    Returns (compiled fn, compile seconds).
    """
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(fn, dynamic=False, fullgraph=True)
    start = time.perf_counter()
    try:
        for _ in range(warm_calls):
            compiled(*warm_args)
        torch.cuda.synchronize()
    except Exception as exc:
        raise NotApplicable(f"torch.compile failed: {short_error(exc)}")
    return compiled, time.perf_counter() - start
