#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""reducekit benchmark: effective bandwidth of every registered op against its peers.

    python bench/bench.py                      # full grid, softmax + log_softmax, 3 dtypes
    python bench/bench.py --quick --ops softmax --dtypes bf16
    python bench/bench.py --from-json bench/results/latest/results.json   # re-render, no GPU

Per (op, dtype, shape) and implementation: check the output against a float64 oracle,
then time it with triton.testing.do_bench (median, L2 flushed before every call) and,
for small shapes, with do_bench_cudagraph (launch overhead removed). GB/s = bytes that
must move (inputs read once + outputs written once) / median time, also shown as % of
a device-to-device copy measured in the same run. See bench/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import registry  # noqa: E402
import report  # noqa: E402
from registry import IMPL_ORDER, REGISTRY, USES_REDUCEKIT, BuildContext, NotApplicable  # noqa: E402

REPO = HERE.parent
# Modules that register op families; a new family adds its module here.
FAMILIES = ["ops_softmax", "ops_reduce", "ops_norm", "ops_loss", "ops_batchnorm"]

DTYPES = {
    "float32": "float32", "fp32": "float32", "f32": "float32", "float": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
    "float64": "float64", "fp64": "float64", "f64": "float64", "double": "float64",
}
DEFAULT_DTYPES = "float32,bfloat16,float16"
COPY_ELEMENTS = 1 << 28  # 1 GiB of float32: far past L2, like the large grid points
# Elements check_output compares at a time: its float64 temporaries of a whole 16384 x 256000
# gradient (31 GiB each, several at once) would not fit beside the oracle and the logits.
CHECK_CHUNK = 1 << 27


def say(*args) -> None:
    print(*args, flush=True)


class Tee:
    """Sends what is printed to the terminal and to bench.log alike."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text):
        self.stream.write(text)
        self.log.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()
        self.log.flush()

    def fileno(self):
        return self.stream.fileno()

    def isatty(self):
        return False


def parse_shapes(text: str):
    shapes = []
    for item in text.split(","):
        item = item.strip().lower()
        if item:  # "MxN", or "MxN/S": N-element rows at stride S
            dims, _, stride = item.partition("/")
            shapes.append(tuple(int(v) for v in dims.split("x")) + ((int(stride),) if stride else ()))
    return shapes


def parse_list(text: str, allowed, what: str):
    values = [v.strip() for v in text.split(",") if v.strip()]
    for v in values:
        if v not in allowed:
            raise SystemExit(f"unknown {what} {v!r}; choose from {', '.join(allowed)}")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=None, help="comma-separated ops (default: every op with in_default_run)")
    p.add_argument("--dtypes", default=DEFAULT_DTYPES, help=f"comma-separated (default {DEFAULT_DTYPES}; "
                   "aliases fp32 bf16 fp16 fp64)")
    p.add_argument("--shapes", default=None, help='e.g. "4096x1024,256x262144" (default: the standard grid)')
    p.add_argument("--quick", action="store_true", help="a few shapes per op instead of the grid")
    p.add_argument("--budget-s", type=float, default=None, metavar="S",
                   help="stop starting new points after S seconds (the rest are recorded as skipped); the "
                        "points then go shape by shape across the ops, so every op and dtype gets its first shapes")
    p.add_argument("--odd", action="store_true",
                   help="rows of odd length or stride beside padded twins, for the ops that have them")
    p.add_argument("--impls", default=",".join(IMPL_ORDER), help=f"comma-separated (default {','.join(IMPL_ORDER)})")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (its compiles dominate run time)")
    p.add_argument("--seed-triton", default=None, metavar="PATH",
                   help="seed_triton.py (default: $REDUCEKIT_SEED_TRITON, <repo>/.peers/seed_triton.py, "
                        "<repo>/../shared/peers/seed_triton.py)")
    p.add_argument("--out", default=None, help="output folder (default bench/results/latest)")
    p.add_argument("--reps", type=float, default=100, metavar="MS",
                   help="do_bench's repetition window in ms (default 100: hundreds of timed calls)")
    p.add_argument("--warmup", type=float, default=25, metavar="MS", help="do_bench's warm-up window in ms (default 25)")
    p.add_argument("--graph", choices=("auto", "all", "none"), default="auto",
                   help="CUDA-graph replay timing: auto = shapes moving <= --graph-max-mib, all, none (default auto)")
    p.add_argument("--graph-max-mib", type=float, default=256, help="auto's limit in MiB moved (default 256)")
    p.add_argument("--graph-reps", type=float, default=20, metavar="MS",
                   help="do_bench_cudagraph's repetition window in ms (default 20)")
    plots = p.add_mutually_exclusive_group()
    plots.add_argument("--plot-combined", dest="plot", action="store_const", const="combined",
                       help="one PNG, a grid of panels: OUT/bench.png (the default)")
    plots.add_argument("--plot-separate", dest="plot", action="store_const", const="separate",
                       help="one PNG per op and dtype: OUT/<op>_<dtype>.png")
    plots.add_argument("--plot-both", dest="plot", action="store_const", const="both")
    plots.add_argument("--no-plot", dest="plot", action="store_const", const="none")
    p.set_defaults(plot="combined")
    p.add_argument("--tune", action="append", default=[], metavar="NAME=VALUE",
                   help="a planner override for this run (reducekit/tuning.hpp names; repeatable): the plan "
                        "measured is then not the shipped one")
    p.add_argument("--from-json", default=None, metavar="PATH",
                   help="re-print the table and summary and re-draw plots from a results.json; needs no GPU")
    return p.parse_args(argv)


def git_commit() -> str:
    """The commit measured: a COMMIT file at the repository root where one exists (a snapshot made
    with git archive has no .git of its own, and git would answer for whatever repository holds
    it), else git's HEAD."""
    stamp = REPO / "COMMIT"
    if stamp.is_file() and stamp.read_text().strip():
        return stamp.read_text().strip()
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else "unknown"
    except Exception:
        return "unknown"


def render(records, meta, out_dir, plot_mode):
    say()
    say(report.format_table(records))
    notes = report.format_notes(records)
    if notes:
        say()
        say(notes)
    say()
    if meta.get("copy_gbps"):
        say(f"copy ceiling: {meta['copy_gbps']:.1f} GB/s (torch copy_ of 2^28 float32, read + write)")
    for line in report.summarize(records):
        say(line)
    if plot_mode != "none":
        try:
            paths = report.plot(records, meta.get("copy_gbps"), str(out_dir),
                                combined=plot_mode in ("combined", "both"),
                                separate=plot_mode in ("separate", "both"),
                                sweep_labels=meta.get("sweep_labels"))
            for path in paths:
                say(f"plot: {path}")
        except Exception as exc:  # plotting must never lose the numbers
            say(f"plot: failed: {type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------- GPU part

def _row_chunks(o, r):
    """(o, r) slices over the first dim of about CHECK_CHUNK elements each (a 0-d pair whole)."""
    if o.dim() == 0 or o.numel() <= CHECK_CHUNK:
        yield o, r
        return
    rows = max(1, CHECK_CHUNK * o.shape[0] // o.numel())
    for i in range(0, o.shape[0], rows):
        yield o[i:i + rows], r[i:i + rows]


def check_output(torch, out, ref, tol):
    """(ok, worst error / tolerance, message). NaN and inf must sit exactly where the oracle has them."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o_all, r_all in zip(outs, refs):
        if tuple(o_all.shape) != tuple(r_all.shape):
            return False, math.inf, f"shape {tuple(o_all.shape)} != {tuple(r_all.shape)}"
        atol, rtol = tol(o_all.dtype)
        for o, r in _row_chunks(o_all, r_all):
            o = o.double()
            if not torch.equal(o.isnan(), r.isnan()):
                return False, math.inf, "NaN pattern differs from the float64 oracle"
            r_inf = r.isinf()
            if bool(r_inf.any()) and not torch.equal(o[r_inf], r[r_inf]):
                return False, math.inf, "inf values differ from the float64 oracle"
            ratio = torch.where(r.isfinite(), (o - r).abs() / (atol + rtol * r.abs()), torch.zeros_like(r))
            worst = max(worst, float(ratio.max()) if ratio.numel() else 0.0)
    if worst > 1.0:
        return False, worst, f"max error {worst:.3g}x the tolerance"
    return True, worst, ""


def measure_copy(torch, do_bench, warmup, reps):
    src = torch.ones(COPY_ELEMENTS, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=warmup, rep=reps, return_mode="median")
    gbps = 2 * COPY_ELEMENTS * 4 / (ms * 1e6)
    del src, dst
    torch.cuda.empty_cache()
    return gbps, ms


def peak_extra(torch, fn, inputs, copy_first=False):
    """Bytes one call allocates at its peak beyond what is held before it (the inputs, the oracle):
    its outputs, the tensors it saves for backward and its workspaces. After a first call, so
    that one-time setup is not counted. copy_first: the call writes over its first input, so it
    gets a copy of it (made before, so not counted, as the input is not)."""
    if copy_first:
        inputs = (inputs[0].clone(),) + tuple(inputs[1:])
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - held
    del out
    return peak


def run_point(torch, spec, shape, dtype_name, impl_names, ctx, args, copy_gbps, timers):
    do_bench, do_bench_cudagraph = timers
    dtype = getattr(torch, dtype_name)
    nbytes = spec.bytes_moved(shape, dtype)
    want_graph = args.graph == "all" or (args.graph == "auto" and nbytes <= args.graph_max_mib * 2**20)
    torch.manual_seed(0)
    inputs = spec.make_inputs(shape, dtype)
    ref = spec.reference(*inputs)
    torch.cuda.synchronize()
    records = []
    for name in impl_names:
        if name not in spec.impls:
            continue
        rec = {"op": spec.name, "impl": name, "dtype": dtype_name, "shape": list(shape), "bytes": nbytes,
               "status": "ok", "gbps": None, "ms": None, "graph_ms": None, "graph_gbps": None,
               "pct_of_copy": None, "max_err": None, "note": "", "sweep_x": spec.sweep_x(shape)}
        records.append(rec)
        try:
            impl = spec.impls[name](ctx, inputs)
        except NotApplicable as exc:
            rec.update(status="n/a", note=str(exc))
            continue
        except Exception as exc:
            rec.update(status="failed", note=f"build: {report_error(exc)}")
            continue
        rec.update(impl.info)
        fn = impl.fn
        try:
            out = fn(*inputs)
            torch.cuda.synchronize()
        except Exception as exc:
            rec.update(status="failed", note=report_error(exc))
            _recover(torch)
            continue
        ok, err, msg = check_output(torch, out, ref, spec.tolerance)
        del out
        rec["max_err"] = None if math.isinf(err) else round(err, 4)  # in units of the tolerance
        if not ok:
            rec.update(status="wrong", note=msg)
            say(f"WARNING: {spec.name} {name} {dtype_name} {report.shape_str(shape)}: WRONG OUTPUT: {msg}")
        if spec.measure_peak:
            try:
                rec.update(peak_extra_bytes=peak_extra(torch, fn, inputs),
                           input_bytes=inputs[0].numel() * inputs[0].element_size())
                if impl.inplace is not None:
                    rec["peak_inplace_bytes"] = peak_extra(torch, impl.inplace, inputs, copy_first=True)
            except Exception as exc:
                rec["note"] = (rec["note"] + "; " if rec["note"] else "") + f"peak memory: {report_error(exc)}"
                _recover(torch)
        try:
            ms = do_bench(lambda: fn(*inputs), warmup=args.warmup, rep=args.reps, return_mode="median")
        except Exception as exc:
            rec.update(status="failed", note=f"timing: {report_error(exc)}")
            _recover(torch)
            continue
        gbps = nbytes / (ms * 1e6)
        rec.update(ms=round(ms, 5), gbps=round(gbps, 1), pct_of_copy=round(100 * gbps / copy_gbps, 1))
        if want_graph:
            try:
                gms = do_bench_cudagraph(lambda: fn(*inputs), rep=args.graph_reps, return_mode="median")
                rec.update(graph_ms=round(gms, 6), graph_gbps=round(nbytes / (gms * 1e6), 1))
            except Exception as exc:
                rec["note"] = (rec["note"] + "; " if rec["note"] else "") + f"graph: {report_error(exc)}"
                _recover(torch)
        del impl, fn
    del inputs, ref
    gc.collect()
    torch.cuda.empty_cache()  # the next shape may need the memory this one cached
    return records


def report_error(exc):
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def _recover(torch):
    """After a failure, make sure nothing is left queued or half-captured before going on."""
    try:
        torch.cuda.synchronize()
    except Exception as exc:
        say(f"WARNING: CUDA error after a failure, later numbers may be unreliable: {report_error(exc)}")


def bench_points(ops, dtypes, shapes_of, breadth_first):
    """The (op, dtype, shape) points in the order measured: op by op, or, where a time budget may
    end the run early, every op and dtype's first shape, then every second shape, and so on, so
    that what the budget leaves out is the last shapes of each, not the last ops."""
    groups = [[(op, dtype, shape) for shape in shapes_of(op)] for op in ops for dtype in dtypes]
    if not breadth_first:
        return [point for group in groups for point in group]
    longest = max((len(group) for group in groups), default=0)
    return [group[i] for i in range(longest) for group in groups if i < len(group)]


def main(argv=None):
    args = parse_args(argv)

    if args.from_json:
        import json
        with open(args.from_json) as f:
            data = json.load(f)
        out_dir = Path(args.out) if args.out else Path(args.from_json).resolve().parent
        out_dir.mkdir(parents=True, exist_ok=True)
        render(data["records"], data["meta"], out_dir, args.plot)
        return 0

    out_dir = Path(args.out) if args.out else HERE / "results" / "latest"
    out_dir.mkdir(parents=True, exist_ok=True)
    log = open(out_dir / "bench.log", "w")
    sys.stdout = Tee(sys.__stdout__, log)
    sys.stderr = Tee(sys.__stderr__, log)
    started = time.perf_counter()

    import warnings
    # inductor's note on split reductions, once per long-row shape; (?s): the message starts with a newline
    warnings.filterwarnings("ignore", message=r"(?s)\s*Online softmax is disabled")

    import torch
    import triton
    from triton.testing import do_bench, do_bench_cudagraph

    if not torch.cuda.is_available():
        say("no CUDA device: nothing to benchmark")
        return 1
    for family in FAMILIES:
        importlib.import_module(family)
    import peers

    ops = (parse_list(args.ops, list(REGISTRY), "op") if args.ops
           else [name for name, spec in REGISTRY.items() if spec.in_default_run])
    dtypes = [DTYPES.get(d.strip().lower()) or d for d in args.dtypes.split(",") if d.strip()]
    parse_list(",".join(dtypes), sorted(set(DTYPES.values())), "dtype")
    impl_names = parse_list(args.impls, IMPL_ORDER, "implementation")
    if args.no_compile:
        impl_names = [i for i in impl_names if i != "torch.compile"]
    user_shapes = parse_shapes(args.shapes) if args.shapes else None

    reducekit, note = (peers.load_reducekit() if set(USES_REDUCEKIT) & set(impl_names)
                       else (None, "reducekit: not selected"))
    say(note)
    for item in args.tune:
        name, _, value = item.partition("=")
        if reducekit is None or not value:
            raise SystemExit(f"--tune {item}: needs NAME=VALUE and reducekit selected")
        torch.ops.reducekit._set_tuning(name, int(value))
        say(f"tuning override: {name} = {value}")
    seed_path = Path(args.seed_triton) if args.seed_triton else peers.default_seed_triton_path()
    seed, note = peers.load_seed_triton(seed_path) if "seed-triton" in impl_names else (None, "seed-triton: not selected")
    say(note)
    ctx = BuildContext(reducekit=reducekit, seed=seed, options=vars(args))

    props = torch.cuda.get_device_properties(0)
    say(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, triton {triton.__version__}")
    copy_gbps, copy_ms = measure_copy(torch, do_bench, args.warmup, args.reps)
    say(f"copy ceiling: {copy_gbps:.1f} GB/s ({copy_ms:.4f} ms for 2 x {COPY_ELEMENTS * 4 / 2**30:.0f} GiB)")

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "git_commit": git_commit(),
        "copy_gbps": round(copy_gbps, 1),
        "copy_ms": round(copy_ms, 5),
        "copy_bytes": 2 * COPY_ELEMENTS * 4,
        "reducekit": getattr(reducekit, "__file__", None),
        "seed_triton": str(seed_path) if seed is not None else None,
        "timing": {"warmup_ms": args.warmup, "rep_ms": args.reps, "return_mode": "median",
                   "graph": args.graph, "graph_max_mib": args.graph_max_mib, "graph_rep_ms": args.graph_reps},
        "argv": sys.argv[1:],
        "sweep_labels": {name: REGISTRY[name].sweep_label for name in ops},
    }
    json_path = str(out_dir / "results.json")
    records = []
    points = bench_points(ops, dtypes, lambda op: user_shapes or (
        REGISTRY[op].odd_shapes if args.odd else REGISTRY[op].quick_shapes if args.quick else REGISTRY[op].shapes),
        breadth_first=args.budget_s is not None)
    bench_started = time.perf_counter()
    skipped = 0
    for i, (op, dtype_name, shape) in enumerate(points, 1):
        spec = REGISTRY[op]
        spent = time.perf_counter() - bench_started
        if args.budget_s is not None and spent > args.budget_s:
            skipped += 1
            continue
        t0 = time.perf_counter()
        recs = run_point(torch, spec, shape, dtype_name, impl_names, ctx, args, copy_gbps,
                         (do_bench, do_bench_cudagraph))
        records += recs
        cells = "  ".join(f"{report.SHORT.get(r['impl'], r['impl'])} "
                          f"{r['gbps'] if r['gbps'] is not None else r['status']}" for r in recs)
        spent = time.perf_counter() - bench_started
        left = spent / i * (len(points) - i)
        if args.budget_s is not None:  # the budget ends the run sooner than the grid would
            left = min(left, max(0.0, args.budget_s - spent))
        say(f"{op} {dtype_name} {report.shape_str(shape)}: {cells} GB/s  [{time.perf_counter() - t0:.1f} s; "
            f"{i}/{len(points)}, about {left:.0f} s left]")
        meta["elapsed_s"] = round(time.perf_counter() - started, 1)
        report.write_json(json_path, meta, records)  # after every point: a killed run keeps its results
    if skipped:
        say(f"budget of {args.budget_s:.0f} s spent: {skipped} of {len(points)} points not measured")
        meta["skipped_points"] = skipped
    render(records, meta, out_dir, args.plot)
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    report.write_json(json_path, meta, records)
    say(f"results: {json_path}; log: {out_dir / 'bench.log'}; {meta['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
