# SPDX-License-Identifier: Apache-2.0
"""Launches each (impl, op, dtype, shape) once so `ncu` can profile the kernels.

    ncu --clock-control none --section SpeedOfLight ... python3 bench/profile_rows.py \
        --shapes 4096x4096,4096x32768 --dtypes bfloat16 --impls reducekit,seed-triton

Impls: reducekit, seed-triton, torch, torch.compile (compiled fresh per shape, as the benchmark
does; its warm-up launches run outside the NVTX range, so `--nvtx --nvtx-include "torch.compile
layer_norm float32 4096x32768/"` profiles the timed launch only).

--op: softmax, log_softmax, layer_norm (weight and bias, over the last dim), rms_norm (weight),
add_layer_norm (layer_norm of x + residual, a random residual; y and s), add_rms_norm (likewise, weight),
sum_col (sum over dim 0), sum_row / mean_row / amax_row (over the last dim), cross_entropy (the
per-row loss, random targets), cross_entropy_step (the fused loss and gradient), cross_entropy_probs (the
per-row loss against class-probability targets).
Each launch is inside an NVTX range "impl op dtype shape". --tune NAME=VALUE profiles reducekit
under a planner override, as bench.py's.
Peers that lack the op (seed Triton has no rms_norm or column sum) are left out.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402
from peers import compile_fresh  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096x4096")
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--impls", default="reducekit,seed-triton")
    p.add_argument("--tune", action="append", default=[], metavar="NAME=VALUE",
                   help="a reducekit planner override (bench.py --tune), for profiling another plan")
    p.add_argument("--op", default="softmax", choices=["softmax", "log_softmax", "layer_norm", "rms_norm",
                                                        "add_layer_norm", "add_rms_norm", "sum_col",
                                                        "sum_row", "mean_row", "amax_row", "cross_entropy",
                                                        "cross_entropy_step", "cross_entropy_probs"])
    args = p.parse_args()
    peers.load_reducekit()  # registers torch.ops.reducekit
    seed, _ = peers.load_seed_triton(peers.default_seed_triton_path())
    ops = torch.ops.reducekit
    for item in args.tune:
        name, _, value = item.partition("=")
        ops._set_tuning(name, int(value))
    params = {}  # weight and bias per (dtype, n), in x's dtype as the benchmark has them

    def wb(x):
        key = (x.dtype, x.shape[-1])
        if key not in params:
            params[key] = tuple(torch.randn(x.shape[-1], device="cuda", dtype=x.dtype) for _ in range(2))
        return params[key]

    def residual(x):  # the fused residual forms' second input, per shape
        key = ("residual", x.dtype, x.shape)
        if key not in params:
            params[key] = torch.randn_like(x)
        return params[key]

    def targets(x):  # class indices and each row's upstream gradient, per shape
        key = ("targets", x.shape)
        if key not in params:
            params[key] = (torch.randint(0, x.shape[-1], x.shape[:-1], device="cuda"),
                           torch.full(x.shape[:-1], 1.0 / x.shape[0], device="cuda"))
        return params[key]

    def probabilities(x):  # class-probability targets of x's dtype, per shape
        key = ("probabilities", x.dtype, x.shape)
        if key not in params:
            params[key] = torch.randn_like(x).softmax(-1)
        return params[key]

    eps = 1e-5

    def torch_add_layer_norm(x):  # y and s, as ops.add_layer_norm gives them
        s = x + residual(x)
        return torch.nn.functional.layer_norm(s, [x.shape[-1]], *wb(x), eps), s

    def torch_add_rms_norm(x):
        s = x + residual(x)
        return torch.nn.functional.rms_norm(s, [x.shape[-1]], wb(x)[0], eps), s

    fns = {
        "softmax": {"reducekit": lambda x: ops.softmax(x, -1), "seed-triton": lambda x: seed.softmax(x),
                    "torch": lambda x: torch.softmax(x, -1)},
        "log_softmax": {"reducekit": lambda x: ops.log_softmax(x, -1), "seed-triton": lambda x: seed.log_softmax(x),
                        "torch": lambda x: torch.log_softmax(x, -1)},
        "layer_norm": {"reducekit": lambda x: ops.layer_norm(x, [x.shape[-1]], *wb(x), eps),
                       "seed-triton": lambda x: seed.layer_norm(x, *wb(x), eps),
                       "torch": lambda x: torch.nn.functional.layer_norm(x, [x.shape[-1]], *wb(x), eps)},
        "rms_norm": {"reducekit": lambda x: ops.rms_norm(x, [x.shape[-1]], wb(x)[0], eps),
                     "torch": lambda x: torch.nn.functional.rms_norm(x, [x.shape[-1]], wb(x)[0], eps)},
        "add_layer_norm": {"reducekit": lambda x: ops.add_layer_norm(x, residual(x), [x.shape[-1]], *wb(x), eps),
                           "torch": torch_add_layer_norm},
        "add_rms_norm": {"reducekit": lambda x: ops.add_rms_norm(x, residual(x), [x.shape[-1]], wb(x)[0], eps),
                         "torch": torch_add_rms_norm},
        "sum_col": {"reducekit": lambda x: ops.sum(x, [0], False), "torch": lambda x: torch.sum(x, 0)},
        "sum_row": {"reducekit": lambda x: ops.sum(x, [-1], False), "torch": lambda x: torch.sum(x, -1)},
        "mean_row": {"reducekit": lambda x: ops.mean(x, [-1], False), "torch": lambda x: torch.mean(x, -1)},
        "amax_row": {"reducekit": lambda x: ops.amax(x, [-1], False), "torch": lambda x: torch.amax(x, -1)},
        "cross_entropy": {"reducekit": lambda x: ops.cross_entropy_forward(x, targets(x)[0], None, -100, 0.0, 0.0, 0.0),
                          "torch": lambda x: torch.nn.functional.cross_entropy(x, targets(x)[0], reduction="none")},
        "cross_entropy_step": {"reducekit": lambda x: ops.cross_entropy_fused(x, targets(x)[0], None, targets(x)[1],
                                                                              -100, 0.0, 0.0, 0.0)},
        "cross_entropy_probs": {
            "reducekit": lambda x: ops.cross_entropy_probs_forward(x, probabilities(x), None, 0.0, 0.0, 0.0),
            "torch": lambda x: torch.nn.functional.cross_entropy(x, probabilities(x), reduction="none")},
    }[args.op]
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n = (int(v) for v in shape.split("x"))
            x = torch.randn(m, n, device="cuda", dtype=getattr(torch, dtype))
            for impl in args.impls.split(","):
                if impl == "torch.compile":
                    wb(x)  # the parameters exist before tracing, so the graph reads them
                    if args.op.startswith("add_"):
                        residual(x)
                    fn = compile_fresh(fns["torch"], (x,))[0]
                elif impl in fns:
                    fn = fns[impl]
                else:
                    continue
                fn(x)  # compiles Triton outside the profiled launch count
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push(f"{impl} {args.op} {dtype} {shape}")
                fn(x)
                torch.cuda.nvtx.range_pop()
                torch.cuda.synchronize()
                print(f"ran {impl} {args.op} {dtype} {shape}", flush=True)


if __name__ == "__main__":
    main()
