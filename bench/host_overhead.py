# SPDX-License-Identifier: Apache-2.0
"""Host time a call: a tiny op called back to back, one synchronization at the end.

    python bench/host_overhead.py [--calls 20000] [--out DIR]

The tensor is so small (8 x 64) that the GPU finishes each kernel before the host issues the
next: the time a call is the host's (Python, dispatcher, launch). reducekit's functional API, the
registered op and torch's own op are timed side by side, for softmax, layer_norm and every
reduction (all with their autograd in C++; softmax and sum also with an input that requires
grad); writes host_overhead.json to --out.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import reducekit  # noqa: E402

ops = torch.ops.reducekit
REDUCTIONS = ["mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std", "var_mean", "std_mean"]


def per_call_us(fn, calls):
    for _ in range(1000):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    x = torch.randn(8, 64, device="cuda")
    xg = x.clone().requires_grad_()
    w, b = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    cases = {
        "softmax": {"reducekit.softmax": lambda: reducekit.softmax(x, -1),
                    "torch.ops.reducekit.softmax": lambda: ops.softmax(x, -1),
                    "torch.softmax": lambda: torch.softmax(x, -1),
                    "reducekit.softmax (input requires grad)": lambda: reducekit.softmax(xg, -1),
                    "torch.softmax (input requires grad)": lambda: torch.softmax(xg, -1)},
        "layer_norm": {"reducekit.layer_norm": lambda: reducekit.layer_norm(x, [64], w, b),
                       "torch.ops.reducekit.layer_norm": lambda: ops.layer_norm(x, [64], w, b, 1e-5),
                       "F.layer_norm": lambda: F.layer_norm(x, [64], w, b)},
        "sum": {"reducekit.sum": lambda: reducekit.sum(x, -1),
                "torch.ops.reducekit.sum": lambda: ops.sum(x, [-1]),
                "torch.sum": lambda: torch.sum(x, -1),
                "reducekit.sum (input requires grad)": lambda: reducekit.sum(xg, -1),
                "torch.sum (input requires grad)": lambda: torch.sum(xg, -1)},
    }
    # the other reductions, functional form against torch's (both take (x, dim))
    for op in REDUCTIONS:
        rk, th = getattr(reducekit, op), getattr(torch, op)
        cases[op] = {f"reducekit.{op}": lambda rk=rk: rk(x, -1), f"torch.{op}": lambda th=th: th(x, -1)}
    results = {}
    for op, impls in cases.items():
        for name, fn in impls.items():
            us = per_call_us(fn, args.calls)
            results[name] = round(us, 2)
            print(f"{op:10s} {name:42s} {us:7.2f} us a call")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "calls": args.calls}
        (Path(args.out) / "host_overhead.json").write_text(json.dumps({"meta": meta, "us_per_call": results}, indent=1))


if __name__ == "__main__":
    main()
