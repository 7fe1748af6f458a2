# SPDX-License-Identifier: Apache-2.0
"""The benchmark's op registry: one OpSpec per op, filled in by the op-family modules.

An OpSpec says everything the harness needs to run one op on one (shape, dtype):
how to make the inputs, how many bytes the op must move at least, a float64 oracle to
check every implementation against, and builders for the implementations. A builder
is called once per (shape, dtype) with the inputs and returns an Impl whose
``fn(*inputs) -> output`` is timed, or raises NotApplicable; building is where per-shape work happens (torch.compile compiles
afresh there), so the timed callable does only the op itself.

A new family (norms, reductions, ...) adds a module like ops_softmax.py that calls
register(); bench.py imports the family modules and never names ops itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Shape = Tuple[int, ...]

# Implementation names, in the order the table and plots show them. "reducekit" is ours,
# every other one is a peer. "reducekit-unfused" is reducekit's pieces composed where the op has
# a fused kernel (cross_entropy: reducekit.log_softmax, then torch's nll_loss): a peer like the
# others, since the fused kernel should beat the composition it replaces.
OURS = "reducekit"
IMPL_ORDER = ("reducekit", "torch", "torch.compile", "seed-triton", "reducekit-unfused")
# The implementations that need the reducekit package loaded.
USES_REDUCEKIT = ("reducekit", "reducekit-unfused")

# The standard grid of rowwise problems (DESIGN.md, Benchmarks): an M = 4096 sweep over N,
# plus long rows, many rows, one very long row per few rows, and tiny rows.
ROWWISE_SWEEP_M = 4096
ROWWISE_GRID: List[Shape] = [(ROWWISE_SWEEP_M, n) for n in (128, 512, 1024, 2048, 4096, 8192, 12800, 32768)] + [
    (256, 262144),
    (32768, 4096),
    (16, 1048576),
    (65536, 64),
]
ROWWISE_QUICK: List[Shape] = [(4096, 512), (4096, 4096), (4096, 32768), (256, 262144), (65536, 64)]
# Vocabulary rows and rows of odd length or stride (`--odd`), each odd one beside its padded twin
# (the row engine's target: odd rows within 5% of padded ones). A third entry is a row stride:
# (M, N, S) is x[:, :N] of an [M, S] tensor, every row starting at its own alignment.
ROWWISE_ODD: List[Shape] = [(2048, 50257), (2048, 50264), (1024, 128256), (1024, 151936), (512, 256000),
                            (4096, 11008, 11011), (4096, 11008)]


def rows_tensor(shape: Sequence[int], dtype) -> Any:
    """randn rows of a rowwise shape: [M, N], or the sliced rows of (M, N, S)."""
    import torch

    if len(shape) == 3:
        m, n, stride = shape
        return torch.randn(m, stride, device="cuda", dtype=dtype)[:, :n]
    return torch.randn(tuple(shape), device="cuda", dtype=dtype)


def rows_of(shape: Sequence[int]) -> Tuple[int, int]:
    """(M, N) of a rowwise shape, stride or not."""
    return int(shape[0]), int(shape[1])


class NotApplicable(Exception):
    """An implementation that does not handle this problem; the message says why."""


@dataclass
class BuildContext:
    """What builders may use: the optional modules and the run's options."""

    reducekit: Any = None          # the imported package, or None when it is not built
    seed: Any = None               # the loaded seed_triton module, or None
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Impl:
    """A built implementation: the callable to time and facts to report (e.g. compile_s)."""

    fn: Callable[..., Any]
    info: Dict[str, Any] = field(default_factory=dict)
    # The same op writing its output over its first input, where the implementation has that
    # form: not timed, only its peak memory measured (on a copy of the input; OpSpec.measure_peak).
    inplace: Optional[Callable[..., Any]] = None


# (context, inputs) -> Impl, or raise NotApplicable
Builder = Callable[[BuildContext, tuple], Impl]


@dataclass
class OpSpec:
    name: str
    # (shape, torch dtype) -> tuple of input tensors on the GPU
    make_inputs: Callable[[Shape, Any], tuple]
    # (shape, torch dtype) -> bytes of every input read once plus every output written once
    bytes_moved: Callable[[Shape, Any], int]
    # (*inputs) -> float64 output(s) on the same data: the oracle for the correctness check
    reference: Callable[..., Any]
    # implementation name -> builder
    impls: Dict[str, Builder]
    shapes: List[Shape]
    quick_shapes: List[Shape]
    # `--odd`: rows of odd length or stride beside padded ones (empty: the op is not run there)
    odd_shapes: List[Shape] = field(default_factory=list)
    # shape -> x value on the plots' sweep, or None for shapes off the sweep
    sweep_x: Callable[[Shape], Optional[int]] = lambda shape: None
    sweep_label: str = "N"
    # (torch dtype) -> (atol, rtol) for the correctness check, in the output's units
    tolerance: Optional[Callable[[Any], Tuple[float, float]]] = None
    # Record each implementation's peak device memory of one call beyond what it is given
    # (peak_extra_bytes; bench.py, peak_extra): for ops whose saved tensors and gradients are the point.
    measure_peak: bool = False
    # False: run only when --ops names it (the default run's budget stays with the forward ops)
    in_default_run: bool = True


REGISTRY: Dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"op {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def rowwise_sweep_x(shape: Sequence[int]) -> Optional[int]:
    """The M = 4096 sweep of the standard grid is plotted against N (sliced rows are off it)."""
    if len(shape) == 2 and shape[0] == ROWWISE_SWEEP_M:
        return int(shape[1])
    return None
