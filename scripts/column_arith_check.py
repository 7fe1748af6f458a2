#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Symbolic check of the column path's arithmetic (src/kernels/reduce_engine.cuh, reduce_column_kernel).

Builds, for one column, the expression tree of merges that each way of spreading the work computes:
one CTA per tile (parts = 1), one per (tile, group of segments) (parts = min(8, segments)) and one
per (tile, segment) (parts = segments), with and without the two-steps-in-flight loads, in the
usual layout (a lane down K a thread) and the wide one (thread t plays lanes t and t + 4: two
slots, the butterfly's first step a merge of a thread's slots), and checks that all are the same
tree (merge(identity, x) == x is the policies' contract) and that every row is folded exactly
once. Mirrors the planner constants of src/plan/reduce_config.hpp. No GPU needed:

    python3 scripts/column_arith_check.py
"""
U, ROW_LANES, GROUPS, MIN_SEGMENT_ROWS, MAX_SEGMENTS = 8, 8, 8, 256, 64
ID = ("id",)


def merge(a, b):
    return b if a == ID else ("m", a, b)


def cdiv(a, b):
    return (a + b - 1) // b


def plan(k):
    length = max(MIN_SEGMENT_ROWS, cdiv(cdiv(k, MAX_SEGMENTS), 64) * 64)
    return length, cdiv(k, length)


def lane_fold(ky, begin, end, two_steps):
    s, k, step = ID, begin + ky * U, ROW_LANES * U

    def rows(k):
        nonlocal s
        if k + U <= end:
            s = ("chunk", s, tuple(range(k, k + U)))
        else:
            for r in range(k, end):
                s = ("fold", s, r)
    if two_steps:
        while k + step + U <= end:
            rows(k)
            rows(k + step)
            k += 2 * step
    while k < end:
        rows(k)
        k += step
    return s


def butterfly(v):  # shfl_down over lanes ky * 4 + cx (width 32): lane ky reads ky + step while < 8
    v = list(v)
    for step in (4, 2, 1):
        v = [merge(v[ky], v[ky + step] if ky + step < ROW_LANES else v[ky]) for ky in range(ROW_LANES)]
    return v[0]


def wide_butterfly(slots):  # slots[t] = (lane t, lane t + 4) of thread t = 0..3: lane_butterfly<P, 8, 2>
    d = ROW_LANES // 2
    v = [merge(slots[t][0], slots[t][1]) for t in range(d)]
    for step in (2, 1):
        v = [merge(v[t], v[t + step] if t + step < d else v[t]) for t in range(d)]
    return v[0]


def cta(k, part, parts, two_steps, wide):
    """Group accumulators by lane (the usual layout) or by (thread, slot) (the wide one)."""
    length, segments = plan(k)
    d = ROW_LANES // 2
    acc = [[ID, ID] for _ in range(d)] if wide else [ID] * ROW_LANES
    for seg in range(part, segments, parts):
        begin, end = seg * length, min(k, seg * length + length)
        if wide:
            st = wide_butterfly([(lane_fold(t, begin, end, two_steps), lane_fold(t + d, begin, end, two_steps))
                                 for t in range(d)])
            g = seg % GROUPS
            acc = [[merge(a[h], st) if t == g % d and h == g // d else a[h] for h in range(2)]
                   for t, a in enumerate(acc)]
        else:
            st = butterfly([lane_fold(ky, begin, end, two_steps) for ky in range(ROW_LANES)])
            acc = [merge(acc[ky], st) if ky == seg % GROUPS else acc[ky] for ky in range(ROW_LANES)]
    return acc


def published_group(acc, group, wide):  # what the CTA of part p stores: group p % 8's accumulator
    d = ROW_LANES // 2
    return acc[group % d][group // d] if wide else acc[group]


def fold_parts(published, first, parts):  # fold_group_partials: parts first, first + 8, ...
    a = ID
    for p in range(first, parts, GROUPS):
        a = merge(a, published[p])
    return a


def run(k, parts, two_steps, wide=False):
    d = ROW_LANES // 2
    if parts == 1:
        acc = cta(k, 0, 1, two_steps, wide)
        return wide_butterfly(acc) if wide else butterfly(acc)
    published = [published_group(cta(k, p, parts, two_steps, wide), p % GROUPS, wide) for p in range(parts)]
    if wide:
        return wide_butterfly([(fold_parts(published, t, parts), fold_parts(published, t + d, parts))
                               for t in range(d)])
    return butterfly([fold_parts(published, g, parts) for g in range(ROW_LANES)])


def rows_of(t, out):
    if t[0] in ("chunk", "fold"):
        rows_of(t[1], out)
        out.extend(t[2] if t[0] == "chunk" else [t[2]])
    elif t[0] == "m":
        rows_of(t[1], out)
        rows_of(t[2], out)


def main():
    bad = 0
    for k in [1, 7, 64, 65, 255, 256, 257, 300, 600, 1037, 2100, 2600, 4096, 4099, 16384, 16385, 32768, 40000, 100003]:
        _, segments = plan(k)
        ref = run(k, 1, False)
        for wide in (False, True):
            for two_steps in (False, True):
                for parts in sorted({1, segments, min(GROUPS, segments)}):
                    t = run(k, parts, two_steps, wide)
                    rows = []
                    rows_of(t, rows)
                    if t != ref or sorted(rows) != list(range(k)):
                        bad += 1
                        print(f"MISMATCH k={k} segments={segments} parts={parts} two_steps={two_steps} wide={wide}")
    print("column arithmetic: every route builds the same tree" if bad == 0 else f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
