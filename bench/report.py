# SPDX-License-Identifier: Apache-2.0
"""Tables, summary lines, JSON and plots from benchmark records. Plain Python (no torch),
so results.json can be re-rendered anywhere: python bench/bench.py --from-json results.json

A record is a dict: op, impl, dtype, shape (list), bytes, status ("ok", "wrong", "n/a",
"failed"), gbps, ms, graph_ms, graph_gbps, pct_of_copy, max_err, note, sweep_x, and where the
op measures memory (OpSpec.measure_peak) peak_extra_bytes, peak_inplace_bytes, input_bytes; older
results.json files lack those, and their columns and lines are then left out.
"""
from __future__ import annotations

import json
import os
import statistics
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional

from registry import IMPL_ORDER, OURS

# Run-to-run noise of a median: differences below this are not called a loss.
NOISE = 0.01

SHORT = {"reducekit": "rk", "torch": "torch", "torch.compile": "compile", "seed-triton": "triton",
         "reducekit-unfused": "rk-unf"}
# Peak memory fields of a record: (field, column suffix, words in the summary).
PEAKS = (("peak_extra_bytes", "", ""), ("peak_inplace_bytes", "-inpl", " in place"))


def shape_str(shape) -> str:
    """"4096x1024"; a rowwise shape with a row stride (M, N, S) as "4096x11008/11011"."""
    if len(shape) == 3 and shape[2] > shape[1]:
        return f"{int(shape[0])}x{int(shape[1])}/{int(shape[2])}"
    return "x".join(str(int(s)) for s in shape)


def impls_in(records: Iterable[dict]) -> List[str]:
    seen = {r["impl"] for r in records}
    return [i for i in IMPL_ORDER if i in seen] + sorted(seen - set(IMPL_ORDER))


def group_points(records: Iterable[dict]) -> "OrderedDict[tuple, Dict[str, dict]]":
    """(op, dtype, shape) -> {impl: record}, in the order the points were run."""
    points: "OrderedDict[tuple, Dict[str, dict]]" = OrderedDict()
    for r in records:
        points.setdefault((r["op"], r["dtype"], tuple(r["shape"])), {})[r["impl"]] = r
    return points


def _gbps_cell(r: Optional[dict]) -> str:
    if r is None or r.get("gbps") is None:
        return "n/a"
    mark = "!" if r.get("status") == "wrong" else ""
    return f"{r['gbps']:.0f}{mark}"


def _us_cell(r: Optional[dict]) -> str:
    if r is None or r.get("graph_ms") is None:
        return "-"
    return f"{r['graph_ms'] * 1e3:.1f}"


def _mib_cell(r: Optional[dict], key: str) -> str:
    if r is None or r.get(key) is None:
        return "-"
    mib = r[key] / 2**20
    return f"{mib:.0f}" if mib >= 10 else f"{mib:.2f}"


def peak_columns(records: List[dict]) -> List[tuple]:
    """(impl, field) of every peak memory measured in these records, in table order."""
    return [(i, key) for key, _, _ in PEAKS for i in impls_in(records)
            if any(r["impl"] == i and r.get(key) is not None for r in records)]


def best_peer(point: Dict[str, dict], key: str = "gbps"):
    """(impl, GB/s) of the fastest correct peer at one point, or (None, None); key "graph_gbps" for replay."""
    peers = [(r[key], i) for i, r in point.items()
             if i != OURS and r.get(key) is not None and r.get("status") == "ok"]
    if not peers:
        return None, None
    gbps, impl = max(peers)
    return impl, gbps


def format_table(records: List[dict]) -> str:
    impls = impls_in(records)
    peers = [i for i in impls if i != OURS]
    has_ours = OURS in impls
    op_width = max([12] + [len(r["op"]) for r in records])  # cross_entropy_training is 22
    cols = [("op", op_width, "<"), ("dtype", 9, "<"), ("shape", 14, "<")]
    cols += [(SHORT.get(i, i), 7, ">") for i in impls]
    if has_ours:
        cols += [("rk%copy", 7, ">")] + [("vs " + SHORT.get(p, p), 10, ">") for p in peers]
    cols += [("us:" + SHORT.get(i, i), 10, ">") for i in impls]
    peaks = peak_columns(records)
    suffix = {key: tail for key, tail, _ in PEAKS}
    cols += [(name, max(8, len(name) + 1), ">") for name in
             ("MiB:" + SHORT.get(i, i) + suffix[key] for i, key in peaks)]

    def line(cells):
        return " ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, cols)).rstrip()

    out = [
        "GB/s = (bytes read once + bytes written once) / median eager time, L2 flushed (triton do_bench);",
        "'!' = output failed the correctness check; vs X = reducekit GB/s / X GB/s;",
        "us:X = CUDA-graph replay time per call in microseconds (small shapes; L2 not flushed).",
    ]
    if peaks:
        out.append("MiB:X = X's peak device memory in one call beyond what it is given (outputs, tensors saved for "
                   "backward, workspaces); X-inpl: the gradient written over the logits.")
    out += [
        line([c for c, _, _ in cols]),
        line(["-" * w for _, w, _ in cols]),
    ]
    for (op, dtype, shape), point in group_points(records).items():
        cells = [op, dtype, shape_str(shape)] + [_gbps_cell(point.get(i)) for i in impls]
        if has_ours:
            ours = point.get(OURS)
            ours_gbps = ours.get("gbps") if ours else None
            pct = ours.get("pct_of_copy") if ours else None
            cells.append(f"{pct:.1f}" if pct is not None else "n/a")
            for p in peers:
                peer = point.get(p)
                if ours_gbps is None or peer is None or not peer.get("gbps"):
                    cells.append("n/a")
                else:
                    mark = "!" if "wrong" in (ours.get("status"), peer.get("status")) else ""
                    cells.append(f"{ours_gbps / peer['gbps']:.2f}x{mark}")
        cells += [_us_cell(point.get(i)) for i in impls]
        cells += [_mib_cell(point.get(i), key) for i, key in peaks]
        out.append(line(cells))
    return "\n".join(out)


def format_notes(records: List[dict]) -> str:
    """Why cells are n/a or marked: one line per distinct (op, impl, note)."""
    lines, seen = [], set()
    for r in records:
        note = r.get("note")
        if not note or r.get("status") == "ok":
            continue
        key = (r["op"], r["impl"], r["status"], note)
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"NOTE {r['op']} {r['impl']} {r['dtype']} {shape_str(r['shape'])}: {r['status']}: {note}")
    return "\n".join(lines)


def summarize(records: List[dict]) -> List[str]:
    """Per op and dtype: reducekit's min/median % of copy and where it loses to the best peer."""
    lines = []
    per_key: "OrderedDict[tuple, list]" = OrderedDict()
    for (op, dtype, shape), point in group_points(records).items():
        per_key.setdefault((op, dtype), []).append((shape, point))
    for (op, dtype), points in per_key.items():
        head = f"SUMMARY {op} {dtype}:"
        peak = _peak_lines(op, dtype, points)
        ours = [(s, p[OURS]) for s, p in points if OURS in p and p[OURS].get("gbps") is not None]
        if not ours:
            reasons = {p[OURS].get("note") for _, p in points if OURS in p} - {None, ""}
            lines.append(f"{head} reducekit not measured ({'; '.join(sorted(reasons)) or 'not run'})")
            lines += peak
            continue
        pcts = [r["pct_of_copy"] for _, r in ours if r.get("pct_of_copy") is not None]
        text = f"{head} reducekit % of copy min {min(pcts):.1f} median {statistics.median(pcts):.1f} over {len(pcts)} shapes"
        wrong = [shape_str(s) for s, r in ours if r.get("status") != "ok"]
        count, slower = _slower_than_best_peer(points, "gbps")
        text += f"; slower than the best peer (by > {NOISE:.0%}) at {len(slower)}/{count}"
        if slower:
            text += ": " + ", ".join(slower)
        if wrong:
            text += f"; WRONG OUTPUT at {len(wrong)}: " + ", ".join(wrong)
        lines.append(text)
        lines += _odd_rows_lines(op, dtype, points)
        # Eager calls of small problems time Python dispatch too (torch.compile's guards most of all);
        # graph replay takes that away from every implementation alike.
        count, slower = _slower_than_best_peer(points, "graph_gbps")
        if count:
            text = f"SUMMARY {op} {dtype} graph replay: slower than the best peer (by > {NOISE:.0%}) at {len(slower)}/{count}"
            lines.append(text + (": " + ", ".join(slower) if slower else ""))
        lines += peak
    return lines


def _padded_twin(shape: tuple) -> Optional[tuple]:
    """The aligned shape an odd row shape is measured beside (`--odd`): M x N sliced from rows of
    stride S beside M x N; M x N of a length no 16-byte vector divides beside N padded to 8."""
    if len(shape) == 3 and shape[2] > shape[1]:
        return tuple(shape[:2])
    if len(shape) == 2 and shape[1] % 8 != 0:
        return (shape[0], -(-shape[1] // 8) * 8)
    return None


def _odd_rows_lines(op, dtype, points) -> List[str]:
    """Issue 19's odd-row targets where a run has padded twins (`--odd`): reducekit's GB/s at an
    odd shape against its twin's (within 5%), and against torch eager at every row shape that is
    not itself a twin (at least 1.5 times)."""
    def gbps_of(impl):  # shape -> GB/s where measured
        return {tuple(s): p[impl]["gbps"] for s, p in points if impl in p and p[impl].get("gbps") is not None}
    ours, eager = gbps_of(OURS), gbps_of("torch")
    twins = {s: _padded_twin(s) for s in ours if _padded_twin(s) in ours}
    if not twins:
        return []
    within = sum(ours[s] >= 0.95 * ours[t] for s, t in twins.items())
    text = (f"SUMMARY {op} {dtype} odd rows: within 5% of the padded twin at {within}/{len(twins)} ("
            + ", ".join(f"{shape_str(s)} {ours[s] / ours[t]:.2%}" for s, t in twins.items()) + ")")
    rows = [s for s in ours if len(s) in (2, 3) and s not in twins.values() and s in eager]  # not 4-D shapes
    ratios = [(s, ours[s] / eager[s]) for s in rows]
    if ratios:
        text += (f"; at least 1.5x torch eager at {sum(x >= 1.5 for _, x in ratios)}/{len(ratios)} ("
                 + ", ".join(f"{shape_str(s)} {x:.2f}x" for s, x in ratios) + ")")
    return [text]


def _peak_lines(op, dtype, points) -> List[str]:
    """The most each implementation's call allocated beyond its inputs over these points, in
    multiples of the first input (the logits): issue 16 asks a step for at most 1 (the gradient)
    plus O(M), and 0 plus O(M) with the gradient in place."""
    parts = []
    for key, _, words in PEAKS:
        for impl in impls_in([r for _, p in points for r in p.values()]):
            ratios = [p[impl][key] / p[impl]["input_bytes"] for _, p in points
                      if impl in p and p[impl].get(key) is not None and p[impl].get("input_bytes")]
            if ratios:
                parts.append(f"{impl}{words} {max(ratios):.2f}")
    if not parts:
        return []
    return [f"SUMMARY {op} {dtype} peak memory of a call beyond its inputs, in logits sizes (the most over "
            f"{len(points)} shapes): " + ", ".join(parts)]


def _slower_than_best_peer(points, key):
    """(points compared, descriptions of those where reducekit is slower) using GB/s under key."""
    count, slower = 0, []
    for shape, point in points:
        r = point.get(OURS)
        peer, peer_gbps = best_peer(point, key)
        if r is None or r.get(key) is None or peer is None:
            continue
        count += 1
        if r[key] < peer_gbps * (1 - NOISE):
            slower.append(f"{shape_str(shape)} ({peer} {peer_gbps:.0f} > {r[key]:.0f} GB/s)")
    return count, slower


def write_json(path: str, meta: dict, records: List[dict]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)
    os.replace(tmp, path)  # a run killed mid-write leaves the previous complete file


def plot(records: List[dict], copy_gbps: Optional[float], out_dir: str, combined: bool = True,
         separate: bool = False, sweep_labels: Optional[Dict[str, str]] = None) -> List[str]:
    """GB/s against the sweep's x (log scale), one line per implementation, copy as a ceiling.
    combined: one PNG with a grid of panels (rows = ops, columns = dtypes); separate: one per op and dtype."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep_labels = sweep_labels or {}
    panels: "OrderedDict[tuple, list]" = OrderedDict()
    for r in records:
        if r.get("sweep_x") is not None:
            panels.setdefault((r["op"], r["dtype"]), []).append(r)
    if not panels:
        return []
    impls = impls_in(records)
    colors = {i: f"C{k}" for k, i in enumerate(impls)}

    def draw(ax, op, dtype, rows):
        for impl in impls:
            pts = sorted((r["sweep_x"], r["gbps"], r.get("status")) for r in rows
                         if r["impl"] == impl and r.get("gbps") is not None)
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            style = dict(lw=2.4) if impl == OURS else dict(lw=1.4)
            ax.plot(xs, ys, marker="o", ms=3.5, color=colors[impl], label=impl, **style)
            bad = [(x, y) for x, y, s in pts if s != "ok"]
            if bad:
                ax.scatter([b[0] for b in bad], [b[1] for b in bad], marker="x", s=60, color="red", zorder=5,
                           label=f"{impl}: wrong output")
        if copy_gbps:
            ax.axhline(copy_gbps, color="black", ls="--", lw=1, label=f"copy {copy_gbps:.0f} GB/s")
        ax.set_xscale("log", base=2)
        top = max([copy_gbps or 0] + [r["gbps"] for r in rows if r.get("gbps") is not None])
        ax.set_ylim(0, top * 1.12)
        ax.set_title(f"{op} {dtype}")
        ax.set_xlabel(sweep_labels.get(op, "N"))
        ax.set_ylabel("GB/s")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", framealpha=0.8)

    written = []
    if combined:
        ops = list(OrderedDict.fromkeys(op for op, _ in panels))
        dtypes = list(OrderedDict.fromkeys(dt for _, dt in panels))
        fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(5.2 * len(dtypes), 3.8 * len(ops)), squeeze=False)
        for i, op in enumerate(ops):
            for j, dtype in enumerate(dtypes):
                if (op, dtype) in panels:
                    draw(axes[i][j], op, dtype, panels[(op, dtype)])
                else:
                    axes[i][j].set_visible(False)
        fig.tight_layout()
        path = os.path.join(out_dir, "bench.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    if separate:
        for (op, dtype), rows in panels.items():
            fig, ax = plt.subplots(figsize=(6.4, 4.4))
            draw(ax, op, dtype, rows)
            fig.tight_layout()
            path = os.path.join(out_dir, f"{op}_{dtype}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written
