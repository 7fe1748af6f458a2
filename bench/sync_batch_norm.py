# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm across GPUs (issue 18): reducekit.nn.SyncBatchNorm against torch.nn.SyncBatchNorm,
a training step (forward and backward) on each rank's share of a global batch, beside the
single-GPU step of reducekit.nn.BatchNorm2d and torch.nn.BatchNorm2d on one rank's share.

    torchrun --standalone --nproc_per_node=2 bench/sync_batch_norm.py --out DIR
    torchrun --standalone --nproc_per_node=1 bench/sync_batch_norm.py --out DIR   # one GPU

One process a GPU, NCCL (NCCL_NVLS_ENABLE=0 is set unless the environment sets it: NVLink
multicast stays off on the shared machines). The grid is issue 18's: global batches
(32, 64, 112, 112), (64, 256, 28, 28), (256, 1024, 7, 7), (8, 32, 256, 256), the batch N split
evenly over the ranks; float32 and bfloat16 (weight, bias and running statistics float32, as
torch's modules keep them); NCHW and channels-last (x, dy, y and dx alike).

The step: y = module(x) on a fresh leaf, then dx, dweight, dbias (torch.autograd.grad with a
fixed dy), the running statistics updated as training does. Timing, per implementation: --warmup
steps, then --reps steps, each after an L2 flush (a 256 MiB buffer zeroed) and, for the synced
modules, a one-element all_reduce that lines the ranks' streams up, so that a rank's time does
not include waiting for another rank's flush; CUDA events around the step alone. Each rank
times its own steps; the median a rank, and the largest of the ranks' medians is the point's
time (the step ends when its slowest rank does). Every rank runs the same number of steps, so
the collectives inside them pair up (a time-budgeted loop would not). The single-GPU columns are
rank 0's alone (no collective), while the other ranks wait. With one rank, the synced modules run
plain BatchNorm (torch's and reducekit's alike skip the collectives in a group of one).

This is eager time, host included where the GPU waits for it: torch's SyncBatchNorm
synchronizes with the host once a forward (it drops empty ranks' statistics by a mask), and
that stall is part of its step, as it is in training.

Before timing, one step of each pair (reducekit and torch, on the same data and parameters) is
compared: y, dx, dweight, dbias and the running statistics, the largest error in units of
(atol * max(1, max |torch's|) + rtol * |torch's|); above 1 on any rank, a WARNING line names it.

Rank 0 prints a line a point (i/N) and a SUMMARY: at how many points reducekit's synced step is
at least as fast as torch's, the slower ones named; and writes DIR/sync_batch_norm.json (after
every point, so a killed run keeps what it measured): meta and one record a point with each
implementation's time (max over ranks), every rank's median, GB/s a rank (x, y, dy, dx once each
over the rank's share) and the check's errors.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: NVLink multicast stays off

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("REDUCEKIT_PYTHON_PATH") or str(REPO / "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import reducekit  # noqa: E402

SHAPES = [(32, 64, 112, 112), (64, 256, 28, 28), (256, 1024, 7, 7), (8, 32, 256, 256)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
LAYOUTS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
# name -> (module class, synced across the ranks)
IMPLS = {
    "reducekit_sync": (reducekit.nn.SyncBatchNorm, True),
    "torch_sync": (torch.nn.SyncBatchNorm, True),
    "reducekit_single": (reducekit.nn.BatchNorm2d, False),
    "torch_single": (torch.nn.BatchNorm2d, False),
}
PAIRS = (("reducekit_sync", "torch_sync"), ("reducekit_single", "torch_single"))
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}  # (rtol, atol), as sync_bn_worker.py
FLUSH_BYTES = 256 << 20  # past the H200's 60 MB L2 several times


def say(*args):
    print(*args, flush=True)


def git_commit():
    stamp = REPO / "COMMIT"  # a snapshot made with git archive carries its commit here
    if stamp.is_file() and stamp.read_text().strip():
        return stamp.read_text().strip()
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return res.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def nccl_version():
    v = torch.cuda.nccl.version()  # a tuple in current torch, an int (2.21.5 -> 22105) in older ones
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def point_name(record):
    return f"{tuple(record['shape'])} {record['dtype']} {record['layout']}"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "latest"), help="folder for sync_batch_norm.json")
    p.add_argument("--reps", type=int, default=200, help="timed steps an implementation and point")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before them")
    p.add_argument("--dtypes", default="float32,bfloat16", help=f"from {','.join(DTYPES)}")
    p.add_argument("--layouts", default="nchw,nhwc", help=f"from {','.join(LAYOUTS)}")
    args = p.parse_args()
    for name, allowed in (("dtypes", DTYPES), ("layouts", LAYOUTS)):
        values = [v for v in getattr(args, name).split(",") if v]
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            p.error(f"--{name}: unknown {', '.join(bad) or '(empty)'}; expected names from {', '.join(allowed)}")
        setattr(args, name, values)
    if args.reps < 1 or args.warmup < 1:
        p.error("--reps and --warmup: at least 1")
    return args


def start_ranks():
    """(rank, world, device) after init_process_group, or exits with the reason on a launch that
    cannot run (not under torchrun, fewer GPUs than processes on this host)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("sync_batch_norm.py: launch it with torchrun, one process a GPU: "
                 "torchrun --standalone --nproc_per_node=2 bench/sync_batch_norm.py --out DIR")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < local_world:
        # Every process on the host sees the same count, so all of them stop here, before any
        # collective could wait for one that did not start.
        if local == 0:
            sys.exit(f"sync_batch_norm.py: {local_world} processes on this host but {gpus} CUDA device(s) visible; "
                     f"it needs one GPU a process (use --nproc_per_node={gpus} or fewer)" if gpus else
                     "sync_batch_norm.py: no CUDA device visible; it needs one GPU a process")
        sys.exit(1)
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    return rank, world, torch.device("cuda", local)


def make_module(name, channels, device):
    """The implementation's module in training mode, every one with the same weight and bias."""
    cls, _ = IMPLS[name]
    module = cls(channels).to(device).train()
    g = torch.Generator().manual_seed(channels)
    with torch.no_grad():
        module.weight.copy_(1 + 0.1 * torch.randn(channels, generator=g))
        module.bias.copy_(0.1 * torch.randn(channels, generator=g))
    return module


def make_step(module, x, dy):
    """One training step on a fresh leaf: (y, dx, dweight, dbias)."""
    params = (module.weight, module.bias)

    def step():
        leaf = x.detach().requires_grad_()
        y = module(leaf)
        return (y,) + torch.autograd.grad(y, (leaf,) + params, dy)
    return step


def time_steps(step, reps, warmup, flush, line_up):
    """Median ms of `reps` steps, each after an L2 flush and (line_up) an all_reduce that has the
    ranks start together."""
    token = torch.zeros(1, device=flush.device)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        flush.zero_()
        if line_up:
            dist.all_reduce(token)  # the current stream waits for it, so the start event follows it
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def worst_error(got, want, dtype):
    """Largest |got - want| / (atol * max(1, max |want|) + rtol * |want|) over the tensors given."""
    rtol, atol = TOL[dtype]
    worst = 0.0
    for g, w in zip(got, want):
        if g.numel() == 0:
            continue
        g, w = g.detach().double(), w.detach().double()
        if not torch.equal(g.isnan(), w.isnan()):
            return float("inf")
        scale = max(1.0, float(w.abs().nan_to_num(posinf=0, neginf=0).max()))
        ratio = ((g - w).abs() / (atol * scale + rtol * w.abs())).nan_to_num(nan=0.0)
        worst = max(worst, float(ratio.max()))
    return worst


def check_pair(ours, theirs, dtype, make_inputs):
    """Worst error of one step of `ours` against one step of `theirs` (outputs, gradients and the
    running statistics), each on fresh modules and the same inputs."""
    x, dy = make_inputs()
    got = make_step(ours, x, dy)()
    want = make_step(theirs, x, dy)()
    worst = worst_error(got[:2], want[:2], dtype)  # y and dx: x's dtype
    # dweight, dbias and the running statistics: float32, as the modules keep them
    rest = worst_error(got[2:] + (ours.running_mean, ours.running_var),
                       want[2:] + (theirs.running_mean, theirs.running_var), torch.float32)
    return max(worst, rest)


def gather_ranks(values, world, device):
    """Every rank's list of floats (NaN: not measured there), in rank order, on every rank."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    every = torch.empty((world, len(values)), dtype=torch.float64, device=device)
    dist.all_gather_into_tensor(every, mine)
    return every.tolist()


def run_point(shape, dtype, layout, rank, world, device, args, flush):
    """Every rank's (ms of each implementation, NaN where it did not run; worst error of each pair)."""
    n, c, h, w = shape
    rank_shape = (n // world, c, h, w)
    fmt = LAYOUTS[layout]

    def make_inputs():
        # Each rank its own share: the seed follows the rank, as a data loader's does.
        g = torch.Generator(device=device).manual_seed(1000 * rank + n + c)
        x = (2 * torch.randn(rank_shape, device=device, generator=g) + 0.5).to(dtype).contiguous(memory_format=fmt)
        dy = torch.randn(rank_shape, device=device, generator=g).to(dtype).contiguous(memory_format=fmt)
        return x, dy

    times = {name: float("nan") for name in IMPLS}
    errors = {}
    for ours, theirs in PAIRS:
        synced = IMPLS[ours][1]
        if synced or rank == 0:
            errors[ours] = check_pair(make_module(ours, c, device), make_module(theirs, c, device), dtype,
                                      make_inputs)
            x, dy = make_inputs()
            for name in (ours, theirs):
                step = make_step(make_module(name, c, device), x, dy)
                times[name] = time_steps(step, args.reps, args.warmup, flush, line_up=synced)
            del x, dy
        else:
            errors[ours] = float("nan")
        dist.barrier()  # the other ranks wait here while rank 0 times the single-GPU pair
    torch.cuda.empty_cache()
    return times, errors


def fmt_ms(v):
    return "n/a" if v != v else f"{v:.4f}"


def main():
    args = parse_args()
    rank, world, device = start_ranks()
    bad = [s for s in SHAPES if s[0] % world]
    if bad:
        if rank == 0:
            say(f"sync_batch_norm.py: the batches of {bad} do not split evenly over {world} ranks")
        dist.destroy_process_group()
        return 2
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device)
    points = [(s, d, l) for d in args.dtypes for l in args.layouts for s in SHAPES]
    names = list(IMPLS)
    out_dir = Path(args.out)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "nccl": nccl_version(),
        "device": torch.cuda.get_device_name(device), "world_size": world,
        "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"), "git_commit": git_commit(),
        "reducekit": getattr(reducekit, "__file__", None),
        "timing": {"reps": args.reps, "warmup": args.warmup, "flush_bytes": FLUSH_BYTES, "statistic": "median a rank, "
                   "max over ranks"},
        "argv": sys.argv[1:],
    }
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        say(f"sync_batch_norm: {world} rank(s) on {meta['device']}, torch {meta['torch']}, NCCL {meta['nccl']}, "
            f"NCCL_NVLS_ENABLE={meta['NCCL_NVLS_ENABLE']}; {len(points)} points, {args.reps} reps after "
            f"{args.warmup} warm-up steps")
        say("times are ms a step (max over ranks); 'x' is torch's time / reducekit's")
    records, started = [], time.perf_counter()
    for i, (shape, dtype_name, layout) in enumerate(points, 1):
        dtype = DTYPES[dtype_name]
        times, errors = run_point(shape, dtype, layout, rank, world, device, args, flush)
        by_rank = gather_ranks([times[k] for k in names] + [errors[k] for k, _ in PAIRS], world, device)
        if rank != 0:
            continue
        rank_shape = (shape[0] // world,) + tuple(shape[1:])
        step_bytes = 4 * rank_shape[0] * rank_shape[1] * rank_shape[2] * rank_shape[3] * dtype.itemsize
        ms, ms_by_rank = {}, {}
        for j, name in enumerate(names):
            column = [row[j] for row in by_rank]
            ms_by_rank[name] = [None if v != v else round(v, 5) for v in column]
            measured = [v for v in column if v == v]
            ms[name] = max(measured) if measured else float("nan")
        err = {}
        for j, (ours, _) in enumerate(PAIRS):
            checked = [row[len(names) + j] for row in by_rank if row[len(names) + j] == row[len(names) + j]]
            err[ours] = max(checked) if checked else float("nan")
        record = {
            "shape": list(shape), "rank_shape": list(rank_shape), "dtype": dtype_name, "layout": layout,
            "ms": {k: round(v, 5) for k, v in ms.items()}, "ms_by_rank": ms_by_rank,
            "gbps_a_rank": {k: round(step_bytes / (v * 1e6), 1) for k, v in ms.items()},
            "speedup_sync": round(ms["torch_sync"] / ms["reducekit_sync"], 3),
            "speedup_single": round(ms["torch_single"] / ms["reducekit_single"], 3),
            "max_err": {k: round(v, 4) for k, v in err.items()},
            "ok": all(v <= 1.0 for v in err.values()),
        }
        records.append(record)
        say(f"[{i}/{len(points)}] {str(tuple(shape)):>20} {dtype_name:8} {layout}  "
            f"sync: reducekit {fmt_ms(ms['reducekit_sync'])} torch {fmt_ms(ms['torch_sync'])} "
            f"x{record['speedup_sync']:.2f} | one GPU, rank batch {rank_shape[0]}: reducekit "
            f"{fmt_ms(ms['reducekit_single'])} torch {fmt_ms(ms['torch_single'])} x{record['speedup_single']:.2f}"
            f"  [{time.perf_counter() - started:.0f} s]")
        for ours, theirs in PAIRS:
            if not err[ours] <= 1.0:
                say(f"WARNING: {ours} differs from {theirs} at {tuple(shape)} {dtype_name} {layout}: "
                    f"worst error {err[ours]:.3g} x the tolerance (rtol, atol {TOL[dtype]})")
        meta["elapsed_s"] = round(time.perf_counter() - started, 1)
        (out_dir / "sync_batch_norm.json").write_text(json.dumps({"meta": meta, "points": records}, indent=1))
    if rank == 0:
        slower = [r for r in records if not r["ms"]["reducekit_sync"] <= r["ms"]["torch_sync"]]
        wrong = [r for r in records if not r["ok"]]
        summary = {"points": len(records), "sync_at_least_as_fast": len(records) - len(slower),
                   "sync_slower": [point_name(r) for r in slower], "mismatched": [point_name(r) for r in wrong]}
        ranks = f"{world} rank{'s' if world > 1 else ''}"
        slower_text = ", ".join(f"{point_name(r)} (x{r['speedup_sync']:.2f})" for r in slower)
        say(f"SUMMARY ({ranks}): reducekit's SyncBatchNorm step at least as fast as torch's at "
            f"{summary['sync_at_least_as_fast']} of {len(records)} points"
            + (f"; slower: {slower_text}" if slower else ""))
        one = sum(r["ms"]["reducekit_single"] <= r["ms"]["torch_single"] for r in records)
        say(f"SUMMARY (one GPU, one rank's batch): reducekit's BatchNorm2d step at least as fast as torch's at "
            f"{one} of {len(records)} points")
        if wrong:
            say(f"SUMMARY: outputs differ from torch's beyond the tolerance at {', '.join(summary['mismatched'])}")
        meta["elapsed_s"] = round(time.perf_counter() - started, 1)
        summary["single_at_least_as_fast"] = one
        path = out_dir / "sync_batch_norm.json"
        path.write_text(json.dumps({"meta": meta, "points": records, "summary": summary}, indent=1))
        say(f"results: {path}; {meta['elapsed_s']:.0f} s")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
