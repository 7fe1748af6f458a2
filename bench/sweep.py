#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs bench.py once per planner setting and prints GB/s side by side.

    python bench/sweep.py --out OUT --ops softmax --dtypes bfloat16 \
        --variant "default:" --variant "e16:block_elems=16" \
        --variant "e16-noring:block_elems=16 ring=0"

Each variant is "name:setting=value setting=value" (planner overrides, passed to bench.py as
--tune; the names: include/reducekit/tuning.hpp's tuning_names()); "peers" is added once with
the peer implementations. Every variant's
results.json lands in OUT/name; the table compares reducekit's GB/s per (op, dtype, shape), and a
second table the CUDA-graph replay GB/s where bench.py timed them (small shapes).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_variant(out: Path, name: str, settings: str, impls: str, bench_args: list) -> list:
    tune = [arg for item in settings.split() for arg in ("--tune", item)]
    folder = out / name
    # torch.compile is measured only where asked for among the peers (its compiles take ~1 s a point).
    no_compile = [] if "torch.compile" in impls.split(",") else ["--no-compile"]
    cmd = [sys.executable, str(HERE / "bench.py"), "--out", str(folder), "--impls", impls, *no_compile,
           "--no-plot", *tune, *bench_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{name}: bench.py failed\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}", flush=True)
        return []
    return json.loads((folder / "results.json").read_text())["records"]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--variant", action="append", required=True, help='"name:setting=value ..."')
    p.add_argument("--peers", default="torch,seed-triton", help="peer impls measured once ('' for none)")
    args, bench_args = p.parse_known_args()
    out = Path(args.out)
    tables = {"gbps": {}, "graph_gbps": {}}  # metric -> (op, dtype, shape) -> {column: GB/s}
    columns = []
    runs = [(v.partition(":")[0], v.partition(":")[2], "reducekit") for v in args.variant]
    if args.peers:
        runs.append(("peers", "", args.peers))
    for name, settings, impls in runs:
        for r in run_variant(out, name, settings, impls, bench_args):
            if r.get("status") != "ok":
                continue
            col = name if impls == "reducekit" else r["impl"]
            if col not in columns:
                columns.append(col)
            key = (r["op"], r["dtype"], "x".join(map(str, r["shape"])))
            for metric, table in tables.items():
                if r.get(metric) is not None:
                    table.setdefault(key, {})[col] = r[metric]
    for metric, title in (("gbps", ""), ("graph_gbps", "graph replay: ")):
        if not tables[metric]:
            continue
        print(title + "op dtype shape | " + " | ".join(columns))
        for key, row in tables[metric].items():
            print(" ".join(key) + " | " + " | ".join(f"{row.get(c, float('nan')):.0f}" for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
