# SPDX-License-Identifier: Apache-2.0
"""Host time a call, reducekit against torch's own op, with torch.utils.benchmark.

    python bench/host_overhead.py [--rounds 30] [--block 1000] [--budget-us 2] [--out DIR]

(REDUCEKIT_PYTHON_PATH: the folder holding another copy of the reducekit package, as bench.py.)

The tensor is so small (8 x 64) that the GPU finishes each kernel before the host issues the
next: the time a call is the host's (Python, dispatcher, launch). For softmax, layer_norm and
every reduction (all with their autograd in C++; softmax and sum also with an input that requires
grad), reducekit's functional API (and for softmax, layer_norm and sum the registered op) is
timed beside torch's own op.

Each implementation has a torch.utils.benchmark Timer; a block is Timer.timeit(--block): that
many calls back to back between two synchronizations. The implementations of one op take turns,
a block each, for --rounds rounds (the order reversed every other round), so that both sides of a
comparison see the same host: host speed can drift 15-30% over a minute, more than
the differences measured. The blocks of each are merged (Measurement.merge) into a median and an
IQR a call. Fixed blocks rather than blocked_autorange: its block-size search aims the timer's
overhead at 1e-4 of a block (~0.1 s of calls here) and runs on every call, so short alternating
rounds of it would be one long block each.

Printed: each implementation's median and IQR, and for each reducekit entry its median minus
torch's and a verdict: within torch + --budget-us (issue 17's bar) or over. host_overhead.json in
--out holds the same per entry. The defaults make 35 implementations x 31,000 calls (warm-up
included): about 12 s at 10 us a call.
"""
import argparse
import json
import os
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

sys.path.insert(0, os.environ.get("REDUCEKIT_PYTHON_PATH") or str(Path(__file__).resolve().parents[1] / "python"))
import reducekit  # noqa: E402

ops = torch.ops.reducekit
REDUCTIONS = ["mean", "prod", "amax", "amin", "argmax", "argmin", "logsumexp", "var", "std", "var_mean", "std_mean"]
WARMUP_CALLS = 1000
DEVICE = "cuda"


def comparisons(device):
    """(op, torch's entry, reducekit's entries): each entry (name, fn)."""
    x = torch.randn(8, 64, device=device)
    xg = x.clone().requires_grad_()
    w, b = torch.randn(64, device=device), torch.randn(64, device=device)
    cases = [
        ("softmax", ("torch.softmax", lambda: torch.softmax(x, -1)),
         [("reducekit.softmax", lambda: reducekit.softmax(x, -1)),
          ("torch.ops.reducekit.softmax", lambda: ops.softmax(x, -1))]),
        ("softmax (input requires grad)", ("torch.softmax (input requires grad)", lambda: torch.softmax(xg, -1)),
         [("reducekit.softmax (input requires grad)", lambda: reducekit.softmax(xg, -1))]),
        ("layer_norm", ("F.layer_norm", lambda: F.layer_norm(x, [64], w, b)),
         [("reducekit.layer_norm", lambda: reducekit.layer_norm(x, [64], w, b)),
          ("torch.ops.reducekit.layer_norm", lambda: ops.layer_norm(x, [64], w, b, 1e-5))]),
        ("sum", ("torch.sum", lambda: torch.sum(x, -1)),
         [("reducekit.sum", lambda: reducekit.sum(x, -1)),
          ("torch.ops.reducekit.sum", lambda: ops.sum(x, [-1]))]),
        ("sum (input requires grad)", ("torch.sum (input requires grad)", lambda: torch.sum(xg, -1)),
         [("reducekit.sum (input requires grad)", lambda: reducekit.sum(xg, -1))]),
    ]
    # the other reductions, functional form against torch's (both take (x, dim))
    for op in REDUCTIONS:
        rk, th = getattr(reducekit, op), getattr(torch, op)
        cases.append((op, (f"torch.{op}", lambda th=th: th(x, -1)), [(f"reducekit.{op}", lambda rk=rk: rk(x, -1))]))
    return cases


def measure(op, entries, rounds, block):
    """{name: merged Measurement} for entries [(name, fn)], timed in alternating blocks."""
    timers = [(name, benchmark.Timer("fn()", globals={"fn": fn}, label=op, description=name)) for name, fn in entries]
    for _, timer in timers:
        timer.timeit(WARMUP_CALLS)  # lazy initialization, caches; under the Timer's thread setting, as measured
    blocks = {name: [] for name, _ in entries}
    for r in range(rounds):
        for name, timer in (timers if r % 2 == 0 else timers[::-1]):
            blocks[name].append(timer.timeit(block))
    return {name: benchmark.Measurement.merge(ms)[0] for name, ms in blocks.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=30, help="blocks per implementation, taken in turns")
    p.add_argument("--block", type=int, default=1000, help="calls in a block (between two synchronizations)")
    p.add_argument("--budget-us", type=float, default=2.0, help="allowed host time over torch's own op, us")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    entries, over = {}, []
    print(f"{'op':30s} {'implementation':42s} {'median':>8s} {'IQR':>6s} {'- torch':>8s}  (us a call)")
    for op, (torch_name, torch_fn), ours in comparisons(DEVICE):
        m = measure(op, [(torch_name, torch_fn)] + ours, args.rounds, args.block)
        base = m[torch_name].median * 1e6
        for name, _ in [(torch_name, torch_fn)] + ours:
            median, iqr = m[name].median * 1e6, m[name].iqr * 1e6
            entry = {"op": op, "median_us": round(median, 3), "iqr_us": round(iqr, 3), "blocks": len(m[name].times)}
            line = f"{op:30s} {name:42s} {median:8.2f} {iqr:6.2f}"
            if name != torch_name:
                diff = median - base
                verdict = "within" if diff <= args.budget_us else "over"
                entry.update(torch=torch_name, minus_torch_us=round(diff, 3), verdict=verdict)
                line += f" {diff:+8.2f}  {verdict} torch + {args.budget_us:g} us"
                if verdict == "over":
                    over.append(name)
            entries[name] = entry
            print(line, flush=True)
    checked = sum("verdict" in e for e in entries.values())
    print(f"verdict: {checked - len(over)} of {checked} reducekit entries within torch + {args.budget_us:g} us"
          + (f"; over: {', '.join(over)}" if over else ""))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        meta = {"torch": torch.__version__,
                "device": torch.cuda.get_device_name() if DEVICE == "cuda" else platform.processor(),
                "timer": "torch.utils.benchmark.Timer.timeit blocks, alternating, merged",
                "rounds": args.rounds, "calls_per_block": args.block, "budget_us": args.budget_us}
        report = {"meta": meta, "entries": entries, "over": over}
        (Path(args.out) / "host_overhead.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
