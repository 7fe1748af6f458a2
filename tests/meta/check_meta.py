# SPDX-License-Identifier: Apache-2.0
"""The Python package without a GPU: every functional op on meta tensors against torch's own op
on meta tensors (shape and dtype), which runs the Python wrappers, their argument handling and the
fake kernels (meta tensors dispatch to them) over the compiled operators; backward through the
autograd nodes (C++ and Python) on meta tensors; and a few bad calls, which must raise torch's
exception types. scripts/check_torch_ops.sh runs it over the package it
assembles from the source tree's Python files and the libraries it built; the GPU suites
(tests/python) check the values.

    REDUCEKIT_PYTHON_PATH=FOLDER_HOLDING_reducekit python tests/meta/check_meta.py
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("REDUCEKIT_PYTHON_PATH") or str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import reducekit  # noqa: E402


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


def cases(dtype):
    """(name, reducekit's call, torch's call) over meta tensors of `dtype`."""
    x, w, b = meta(4, 8, 6, dtype=dtype), meta(6, dtype=dtype), meta(6, dtype=dtype)
    r = meta(4, 8, 6, dtype=dtype)
    logits, target = meta(16, 10, dtype=dtype), torch.zeros(16, dtype=torch.long, device="meta")
    c, rm, rv = meta(4, 8, 5, 5, dtype=dtype), meta(8), meta(8)
    return [
        ("softmax", lambda: reducekit.softmax(x, -1), lambda: torch.softmax(x, -1)),
        ("softmax over dim 1", lambda: reducekit.softmax(x, 1), lambda: torch.softmax(x, 1)),
        ("softmax dtype", lambda: reducekit.softmax(x, 0, dtype=torch.float32),
         lambda: torch.softmax(x, 0, dtype=torch.float32)),
        ("log_softmax", lambda: reducekit.log_softmax(x, -1), lambda: torch.log_softmax(x, -1)),
        ("layer_norm", lambda: reducekit.layer_norm(x, [6], w, b), lambda: F.layer_norm(x, [6], w, b)),
        ("layer_norm 2 dims", lambda: reducekit.layer_norm(x, [8, 6]), lambda: F.layer_norm(x, [8, 6])),
        ("rms_norm", lambda: reducekit.rms_norm(x, [6], w), lambda: F.rms_norm(x, [6], w)),
        ("add_layer_norm", lambda: reducekit.add_layer_norm(x, r, [6], w, b),
         lambda: (F.layer_norm(x + r, [6], w, b), x + r)),
        ("add_rms_norm", lambda: reducekit.add_rms_norm(x, r, [6], w), lambda: (F.rms_norm(x + r, [6], w), x + r)),
        ("sum", lambda: reducekit.sum(x, 1), lambda: torch.sum(x, 1)),
        ("sum all, float32", lambda: reducekit.sum(x, dtype=torch.float32), lambda: torch.sum(x, dtype=torch.float32)),
        ("mean", lambda: reducekit.mean(x, (0, 2), keepdim=True), lambda: torch.mean(x, (0, 2), keepdim=True)),
        ("prod", lambda: reducekit.prod(x, 2), lambda: torch.prod(x, 2)),
        ("amax", lambda: reducekit.amax(x, -1), lambda: torch.amax(x, -1)),
        ("amin", lambda: reducekit.amin(x, (0, 1)), lambda: torch.amin(x, (0, 1))),
        ("argmax", lambda: reducekit.argmax(x, 1), lambda: torch.argmax(x, 1)),
        ("argmin all", lambda: reducekit.argmin(x), lambda: torch.argmin(x)),
        ("logsumexp", lambda: reducekit.logsumexp(x, 1), lambda: torch.logsumexp(x, 1)),
        ("var", lambda: reducekit.var(x, 1), lambda: torch.var(x, 1)),
        ("std", lambda: reducekit.std(x, None, correction=0), lambda: torch.std(x, None, correction=0)),
        ("var_mean", lambda: reducekit.var_mean(x, 2), lambda: torch.var_mean(x, 2)),
        ("std_mean", lambda: reducekit.std_mean(x, 0, keepdim=True), lambda: torch.std_mean(x, 0, keepdim=True)),
        ("cross_entropy", lambda: reducekit.cross_entropy(logits, target), lambda: F.cross_entropy(logits, target)),
        ("cross_entropy none", lambda: reducekit.cross_entropy(logits, target, reduction="none"),
         lambda: F.cross_entropy(logits, target, reduction="none")),
        ("cross_entropy sum", lambda: reducekit.cross_entropy(logits, target, reduction="sum"),
         lambda: F.cross_entropy(logits, target, reduction="sum")),
        ("cross_entropy probabilities", lambda: reducekit.cross_entropy(logits, logits),
         lambda: F.cross_entropy(logits, logits)),
        ("cross_entropy probabilities sum", lambda: reducekit.cross_entropy(logits, logits, reduction="sum"),
         lambda: F.cross_entropy(logits, logits, reduction="sum")),
        ("batch_norm inference", lambda: reducekit.batch_norm(c, rm, rv, training=False),
         lambda: F.batch_norm(c, rm, rv, training=False)),
    ]


def signature(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [(tuple(t.shape), t.dtype) for t in outs]


def grad_cases():
    """(name, reducekit's loss of x, torch's): backward on meta tensors through the C++ autograd
    nodes (the losses' 'mean' / 'sum', the norms) and the Python ones, the gradient's shape and
    dtype against torch's."""
    target = torch.zeros(16, dtype=torch.long, device="meta")
    return [
        ("cross_entropy mean", lambda x: reducekit.cross_entropy(x, target), lambda x: F.cross_entropy(x, target)),
        ("cross_entropy sum", lambda x: reducekit.cross_entropy(x, target, reduction="sum"),
         lambda x: F.cross_entropy(x, target, reduction="sum")),
        ("cross_entropy none", lambda x: reducekit.cross_entropy(x, target, reduction="none").sum(),
         lambda x: F.cross_entropy(x, target, reduction="none").sum()),
        ("cross_entropy probabilities", lambda x: reducekit.cross_entropy(x, meta(16, 10, dtype=x.dtype)),
         lambda x: F.cross_entropy(x, meta(16, 10, dtype=x.dtype))),
        ("layer_norm", lambda x: reducekit.layer_norm(x, [10]).sum(), lambda x: F.layer_norm(x, [10]).sum()),
    ]


def grad_signature(loss_of, dtype):
    x = meta(16, 10, dtype=dtype).requires_grad_()
    loss_of(x).backward()
    return tuple(x.grad.shape), x.grad.dtype


def bad_calls():
    """(name, call, exception type torch raises for it)."""
    x = meta(4, 8)
    return [
        ("softmax dim out of range", lambda: reducekit.softmax(x, 2), IndexError),
        ("sum dim out of range", lambda: reducekit.sum(x, 5), IndexError),
        ("softmax dtype int", lambda: reducekit.softmax(x, -1, dtype=torch.int32), RuntimeError),
        ("layer_norm shape", lambda: reducekit.layer_norm(x, [7]), RuntimeError),
    ]


def main():
    failures = []
    checked = 0
    for dtype in (torch.float32, torch.bfloat16):
        for name, ours, theirs in cases(dtype):
            checked += 1
            try:
                got, want = signature(ours()), signature(theirs())
            except Exception as exc:  # noqa: BLE001 (every failure is reported, then the run fails)
                failures.append(f"{name} ({dtype}): {type(exc).__name__}: {str(exc).splitlines()[0]}")
                continue
            if got != want:
                failures.append(f"{name} ({dtype}): {got}, torch's {want}")
    for dtype in (torch.float32, torch.bfloat16):
        for name, ours, theirs in grad_cases():
            checked += 1
            try:
                got, want = grad_signature(ours, dtype), grad_signature(theirs, dtype)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{name} backward ({dtype}): {type(exc).__name__}: {str(exc).splitlines()[0]}")
                continue
            if got != want:
                failures.append(f"{name} backward ({dtype}): {got}, torch's {want}")
    for name, call, expected in bad_calls():
        checked += 1
        try:
            call()
            failures.append(f"{name}: no error, torch raises {expected.__name__}")
        except expected:
            pass
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{name}: {type(exc).__name__} ({str(exc).splitlines()[0]}), torch raises {expected.__name__}")
    for failure in failures:
        print("FAIL", failure)
    from reducekit import _entry
    print(f"meta checks: {checked - len(failures)} of {checked} passed (reducekit {reducekit.__version__}, "
          f"torch {torch.__version__}; eager entries {'in use' if _entry.eager is not None else 'not built'})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
