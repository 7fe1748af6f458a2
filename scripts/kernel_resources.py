#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Registers and spill of the library's kernels as ptxas reports them, on a machine without a GPU.

Compiles translation units for sm_90 as the build does (-O3, -Xptxas -v) and prints one line a
kernel: registers, spill stores / loads, the demangled name. With --against REV it compiles the
same units from git revision REV as well and prints only the kernels whose numbers differ, the
way a kernel change is checked before it reaches the GPU machine.

    python3 scripts/kernel_resources.py norm:LayerNormForwardOp:false:__nv_bfloat16
    python3 scripts/kernel_resources.py --against HEAD norm:RmsNormForwardOp:false:__half \\
        rowwise:detail::SoftmaxOp:1:float src/ops/cross_entropy.cu

A unit is norm:OP:RESIDUAL:TYPE (src/ops/norm_forward.cu.in), rowwise:OP:INPUTS:TYPE
(src/ops/rowwise.cu.in), or a .cu path under the tree.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = {  # kind: (template, its placeholders in the unit's order)
    "norm": ("src/ops/norm_forward.cu.in", ("NORM_OP", "NORM_RESIDUAL", "NORM_TYPE")),
    "rowwise": ("src/ops/rowwise.cu.in", ("ROW_OP", "ROW_INPUTS", "ROW_TYPE")),
}


def source_of(tree, unit, scratch):
    """The .cu file to compile for `unit` in `tree` (generated into `scratch` for templates)."""
    kind, _, rest = unit.partition(":")
    if kind not in TEMPLATES:
        return os.path.join(tree, unit)
    template, names = TEMPLATES[kind]
    values = rest.rsplit(":", len(names) - 1)  # the op may hold "::"
    if len(values) != len(names):
        sys.exit(f"unit {unit!r}: want {kind}:{':'.join(names)}")
    text = open(os.path.join(tree, template)).read()
    for name, value in zip(names, values):
        text = text.replace(f"@{name}@", value)
    path = os.path.join(scratch, re.sub(r"\W+", "_", unit) + ".cu")
    with open(path, "w") as f:
        f.write(text)
    return path


def resources(tree, unit, scratch):
    """{mangled kernel: (registers, spill stores, spill loads)} of one unit."""
    source = source_of(tree, unit, scratch)
    cmd = ["nvcc", "-arch=sm_90", "-std=c++17", "-O3", "--expt-relaxed-constexpr", f"-I{tree}/include",
           f"-I{tree}/src", "-Xptxas", "-v", "-c", source, "-o", os.devnull]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{unit} ({tree}) did not compile:\n{run.stderr[-3000:]}")
    found, current = {}, None
    for line in run.stderr.splitlines():  # a kernel's name line, then its spill or register line
        m = re.search(r"(?:Function properties for |Compiling entry function ')(\w+)", line)
        if m:
            current = m.group(1)
            found.setdefault(current, [0, 0, 0])
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            found[current][1:] = [int(m.group(1)), int(m.group(2))]
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            found[current][0] = int(m.group(1))
    return {k: tuple(v) for k, v in found.items() if k.startswith("_Z")}


def without_parameters(name):
    """A demangled signature less its trailing parameter list: template arguments may hold
    parentheses of their own ("(reducekit::BatchNormLayout)0")."""
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i] if name[i] == "(" else name
    return name


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return [without_parameters(n.replace("reducekit::kernels::", "").replace("reducekit::", "")) for n in out]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("units", nargs="+")
    parser.add_argument("--against", metavar="REV", help="print only kernels whose numbers differ from REV's")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trees = [REPO]
        if args.against:
            base = os.path.join(scratch, "base")
            os.makedirs(base)
            archive = subprocess.run(["git", "-C", REPO, "archive", args.against, "src", "include"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
            trees.append(base)
        jobs = [(tree, unit, os.path.join(scratch, f"{i}")) for i, tree in enumerate(trees) for unit in args.units]
        for _, _, d in jobs:
            os.makedirs(d, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda job: resources(*job), jobs))
    now = dict(zip(args.units, results[:len(args.units)]))
    before = dict(zip(args.units, results[len(args.units):])) if args.against else {}
    for unit in args.units:
        kernels = sorted(now[unit])
        if args.against:
            kernels = [k for k in kernels if before[unit].get(k) != now[unit][k]]
            print(f"== {unit}: {len(kernels)} of {len(now[unit])} kernels differ from {args.against}")
        else:
            print(f"== {unit}: {len(kernels)} kernels")
        for name, pretty in zip(kernels, demangle(kernels)):
            regs, stores, loads = now[unit][name]
            was = before.get(unit, {}).get(name)
            old = f"{was[0]:3d} regs {was[1]:4d} / {was[2]:4d} spill -> " if was else ("(new) " if args.against else "")
            print(f"  {old}{regs:3d} regs {stores:4d} / {loads:4d} spill  {pretty}")


if __name__ == "__main__":
    main()
