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

--loops adds each kernel's largest loop from its SASS (cuobjdump: on PATH, or from `pip install
nvidia-cuda-cuobjdump`): its instructions, the global bytes its loads and stores move (LDG, STG,
LDGSTS) and the instructions per 16 bytes of them. A 16-byte vector at an H200's copy rate leaves
an SM about 111 issue slots (4.8 TB/s / 132 SMs / 1.98 GHz against 128 lanes), so a streaming loop
far above ~60 is a suspect for being instruction-bound. The counts are static: rarely taken paths
inside the loop count too, and loops over shared memory move no global bytes; ncu's executed
instructions decide.

--sass (with --against) compares each kernel's whole SASS as well: a change that leaves every
kernel's SASS as REV's (a refactor, constants moved between headers) changes neither the bits nor
the speed, which a session without a GPU can show this way. It also counts REV's kernels whose
SASS no kernel of this tree has, whatever its name (a new template parameter renames kernels
that stay the same code).

    python3 scripts/kernel_resources.py --sass --against HEAD src/ops/batch_norm.cu
"""
import argparse
import concurrent.futures
import hashlib
import os
import importlib.util
import re
import shutil
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


def cuobjdump():
    found = shutil.which("cuobjdump")
    spec = importlib.util.find_spec("nvidia")
    for root in ([] if found or spec is None else spec.submodule_search_locations):
        candidate = os.path.join(root, "cu13", "bin", "cuobjdump")
        found = candidate if os.path.exists(candidate) else found
    return found or sys.exit("--loops needs cuobjdump (pip install nvidia-cuda-cuobjdump)")


def sass_bodies(obj):
    """{mangled kernel: its SASS text} of obj."""
    sass = subprocess.run([cuobjdump(), "-sass", obj], capture_output=True, text=True, check=True).stdout
    return {body.split("\n", 1)[0].strip(): body for body in re.split(r"\n\s*Function : ", sass)[1:]}


def largest_loops(bodies):
    """{mangled kernel: (instructions, global bytes)} of each kernel's largest loop (the span of its
    longest backward branch) in its SASS."""
    width = {".128": 16, ".64": 8, ".U16": 2, ".S16": 2, ".U8": 1, ".S8": 1}
    loops = {}
    for name, body in bodies.items():
        code = [(int(a, 16), op) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]
        spans = [(int(m.group(1), 16), at) for at, op in code
                 if (m := re.search(r"BRA (0x[0-9a-f]+)", op)) and int(m.group(1), 16) < at]
        if not spans:
            continue
        lo, hi = max(spans, key=lambda span: span[1] - span[0])
        loop = [op for at, op in code if lo <= at <= hi]
        moved = 0
        for op in loop:
            m = re.search(r"\b(LDGSTS|LDG|STG)(\.\S+)?", op)
            if m:
                moved += next((b for suffix, b in width.items() if suffix in (m.group(2) or "")), 4)
        loops[name] = (len(loop), moved)
    return loops


def resources(tree, unit, scratch, loops=False, sass=False):
    """{mangled kernel: (registers, spill stores, spill loads[, loop instructions, loop global bytes]
    [, SASS digest])} of one unit."""
    source = source_of(tree, unit, scratch)
    obj = os.path.join(scratch, "unit.o") if loops or sass else os.devnull
    cmd = ["nvcc", "-arch=sm_90", "-std=c++17", "-O3", "--expt-relaxed-constexpr", f"-I{tree}/include",
           f"-I{tree}/src", "-Xptxas", "-v", "-c", source, "-o", obj]
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
    kernels = {k: tuple(v) for k, v in found.items() if k.startswith("_Z")}
    bodies = sass_bodies(obj) if loops or sass else {}
    if loops:
        spans = largest_loops(bodies)
        kernels = {k: v + spans.get(k, (0, 0)) for k, v in kernels.items()}
    if sass:
        # The body less what names the kernel (its sections) or the build (ptxas options).
        code = {k: re.sub(r"\.text\.\S+|ptxasOptions.*", "", b.split("\n", 1)[-1]) for k, b in bodies.items()}
        kernels = {k: v + (hashlib.sha1(code.get(k, "").encode()).hexdigest()[:12],) for k, v in kernels.items()}
    return kernels


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
    parser.add_argument("--loops", action="store_true", help="add each kernel's largest loop (SASS, cuobjdump)")
    parser.add_argument("--sass", action="store_true", help="with --against: compare each kernel's whole SASS too")
    args = parser.parse_args()
    if args.sass and not args.against:
        parser.error("--sass compares against a revision: give --against REV")
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
            results = list(pool.map(lambda job: resources(*job, loops=args.loops, sass=args.sass), jobs))
    now = dict(zip(args.units, results[:len(args.units)]))
    before = dict(zip(args.units, results[len(args.units):])) if args.against else {}
    for unit in args.units:
        kernels = sorted(now[unit])
        if args.against:
            kernels = [k for k in kernels if before[unit].get(k) != now[unit][k]]
            print(f"== {unit}: {len(kernels)} of {len(now[unit])} kernels differ from {args.against}")
            if args.sass:
                bodies = {v[-1] for v in now[unit].values()}
                lost = sum(1 for v in before[unit].values() if v[-1] not in bodies)
                print(f"   {lost} of {args.against}'s {len(before[unit])} kernels have no kernel of the same SASS here")
        else:
            print(f"== {unit}: {len(kernels)} kernels")
        def loop_text(numbers):
            if not args.loops or numbers[3] == 0:
                return ""
            per_vector = f"{16 * numbers[3] / numbers[4]:6.1f}" if numbers[4] else "     -"
            return f" loop {numbers[3]:5d} instr {numbers[4]:4d} B {per_vector} /16B"
        for name, pretty in zip(kernels, demangle(kernels)):
            regs, stores, loads = now[unit][name][:3]
            was = before.get(unit, {}).get(name)
            old = (f"{was[0]:3d} regs {was[1]:4d} / {was[2]:4d} spill{loop_text(was)} -> " if was
                   else ("(new) " if args.against else ""))
            sass = " SASS differs" if args.sass and was and was[-1] != now[unit][name][-1] else ""
            print(f"  {old}{regs:3d} regs {stores:4d} / {loads:4d} spill{loop_text(now[unit][name])}{sass}  {pretty}")


if __name__ == "__main__":
    main()
