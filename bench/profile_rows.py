"""Launches each (impl, op, dtype, shape) once so `ncu` can profile the kernels.

    ncu --clock-control none --section SpeedOfLight ... python3 bench/profile_rows.py \
        --shapes 4096x4096,4096x32768 --dtypes bfloat16 --impls reducekit,seed-triton
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096x4096")
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--impls", default="reducekit,seed-triton")
    p.add_argument("--op", default="softmax", choices=["softmax", "log_softmax"])
    args = p.parse_args()
    rk, _ = peers.load_reducekit()
    seed, _ = peers.load_seed_triton(peers.default_seed_triton_path())
    fns = {
        "reducekit": lambda x: getattr(torch.ops.reducekit, args.op)(x, -1),
        "seed-triton": lambda x: getattr(seed, args.op)(x),
        "torch": lambda x: getattr(torch, args.op)(x, -1),
    }
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n = (int(v) for v in shape.split("x"))
            x = torch.randn(m, n, device="cuda", dtype=getattr(torch, dtype))
            for impl in args.impls.split(","):
                fns[impl](x)  # compiles Triton outside the profiled launch count
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push(f"{impl} {dtype} {shape}")
                fns[impl](x)
                torch.cuda.nvtx.range_pop()
                torch.cuda.synchronize()
                print(f"ran {impl} {dtype} {shape}", flush=True)


if __name__ == "__main__":
    main()
