# SPDX-License-Identifier: Apache-2.0
"""Bad inputs get a clear error naming the argument (or torch's result), never a crash.

Every case runs in a child process, so a crash (a segmentation fault, a CUDA error that kills the
context) fails that case instead of ending the suite: the child reports each case as it goes, and
when it dies the case it was in is recorded as a crash and a new child takes the cases after it.
A case either must raise (`error`: the message names one of the given words), or must give
torch's result (`match`), or may do either (`either`: an error naming the words, or torch's
result). After every case the child checks that no CUDA error was left pending.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PACKAGE_PATH

# name -> (expectation, words an error must name, code). The code runs with torch, reducekit (as
# rk) and x9 (a rank-9 CUDA tensor) in scope; `match` and `either` cases set `out` and `ref`.
CASES = {
    # rank above 8: TensorView holds 8 dims
    "softmax_rank9": ("either", ["rank"], "out = rk.softmax(x9, -1); ref = torch.softmax(x9, -1)"),
    "log_softmax_rank9": ("either", ["rank"], "out = rk.log_softmax(x9, 0); ref = torch.log_softmax(x9, 0)"),
    "sum_rank9": ("either", ["rank"], "out = rk.sum(x9, dim=-1); ref = torch.sum(x9, dim=-1)"),
    "sum_all_rank9": ("either", ["rank"], "out = rk.sum(x9); ref = torch.sum(x9)"),
    "amax_rank9": ("either", ["rank"], "out = rk.amax(x9, dim=3); ref = torch.amax(x9, dim=3)"),
    "var_rank9": ("either", ["rank"], "out = rk.var(x9, dim=1); ref = torch.var(x9, dim=1)"),
    "argmax_rank9": ("either", ["rank"], "out = rk.argmax(x9, dim=2); ref = torch.argmax(x9, dim=2)"),
    "layer_norm_rank9": ("either", ["rank"],
                         "out = rk.layer_norm(x9, [2]); ref = torch.nn.functional.layer_norm(x9, [2])"),
    "rms_norm_rank9": ("either", ["rank"], "out = rk.rms_norm(x9, [2, 2]); "
                       "ref = torch.nn.functional.rms_norm(x9, [2, 2], eps=torch.finfo(x9.dtype).eps)"),
    "softmax_backward_rank9": ("either", ["rank"], textwrap.dedent("""\
        a = x9.clone().requires_grad_(); b = x9.clone().requires_grad_()
        rk.softmax(a, -1).sum().backward(); torch.softmax(b, -1).sum().backward()
        out = a.grad; ref = b.grad""")),
    # devices and dtypes
    "softmax_cpu": ("either", ["cuda", "device"], "x = torch.randn(4, 8); out = rk.softmax(x, -1); ref = torch.softmax(x, -1)"),
    "sum_cpu": ("either", ["cuda", "device"], "x = torch.randn(4, 8); out = rk.sum(x, dim=0); ref = torch.sum(x, dim=0)"),
    "softmax_int": ("error", ["dtype", "float", "int"], "rk.softmax(torch.arange(8, device='cuda'), -1)"),
    "layer_norm_int": ("error", ["dtype", "float", "int"],
                       "rk.layer_norm(torch.arange(8, device='cuda').view(2, 4), [4])"),
    "layer_norm_weight_on_cpu": ("error", ["weight", "device", "cuda"],
                                 "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], torch.ones(4))"),
    "add_rms_norm_residual_on_cpu": ("error", ["residual", "device", "cuda"],
                                     "rk.add_rms_norm(torch.randn(2, 4, device='cuda'), torch.randn(2, 4), [4])"),
    # shapes and dims
    "softmax_dim_out_of_range": ("error", ["dim", "range"], "rk.softmax(torch.randn(2, 3, device='cuda'), 2)"),
    "sum_dim_out_of_range": ("error", ["dim", "range"], "rk.sum(torch.randn(2, 3, device='cuda'), dim=-3)"),
    "sum_repeated_dim": ("error", ["dim", "repeat", "twice", "multiple"],
                         "rk.sum(torch.randn(2, 3, device='cuda'), dim=(0, 0))"),
    "layer_norm_shape_mismatch": ("error", ["normalized_shape", "shape"],
                                  "rk.layer_norm(torch.randn(2, 4, device='cuda'), [5])"),
    "layer_norm_weight_shape": ("error", ["weight", "shape"],
                                "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], torch.ones(5, device='cuda'))"),
    "layer_norm_bias_shape": ("error", ["bias", "shape"], "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], "
                              "torch.ones(4, device='cuda'), torch.ones(3, device='cuda'))"),
    "add_layer_norm_residual_shape": ("error", ["residual", "shape"],
                                      "rk.add_layer_norm(torch.randn(2, 4, device='cuda'), "
                                      "torch.randn(3, 4, device='cuda'), [4])"),
    "argmax_empty": ("error", ["empty", "no elements", "numel", "zero"],
                     "rk.argmax(torch.randn(0, 3, device='cuda'), dim=0)"),
    "amax_empty": ("error", ["empty", "no elements", "numel", "zero", "identity"],
                   "rk.amax(torch.randn(0, 3, device='cuda'), dim=0)"),
    # zero-size and strided inputs that have an answer
    "softmax_zero_rows": ("match", [], "x = torch.randn(0, 7, device='cuda'); out = rk.softmax(x, -1); "
                          "ref = torch.softmax(x, -1)"),
    "sum_zero_size": ("match", [], "x = torch.randn(3, 0, device='cuda'); out = rk.sum(x, dim=1); ref = torch.sum(x, dim=1)"),
    "softmax_transposed": ("match", [], "x = torch.randn(6, 5, device='cuda').t(); out = rk.softmax(x, -1); "
                           "ref = torch.softmax(x, -1)"),
    "softmax_expanded": ("match", [], "x = torch.randn(1, 9, device='cuda').expand(4, 9); out = rk.softmax(x, -1); "
                         "ref = torch.softmax(x, -1)"),
    "layer_norm_sliced_rows": ("match", [], "x = torch.randn(5, 11, device='cuda')[:, :10]; "
                               "out = rk.layer_norm(x, [10]); ref = torch.nn.functional.layer_norm(x, [10])"),
}

CHILD = textwrap.dedent("""\
    import json, sys, traceback
    sys.path.insert(0, {path!r})
    import torch
    import reducekit as rk
    cases = json.loads({cases!r})
    for name in json.loads(sys.argv[1]):
        print(json.dumps({{"start": name}}), flush=True)
        scope = {{"torch": torch, "rk": rk, "x9": torch.randn(*[2] * 9, device="cuda")}}
        result = {{"name": name}}
        try:
            exec(cases[name], scope)
            if "out" in scope:
                torch.testing.assert_close(scope["out"], scope["ref"])
                result["status"] = "match"
            else:
                result["status"] = "returned"
        except AssertionError as exc:
            result.update(status="mismatch", message=str(exc)[:500])
        except Exception as exc:
            result.update(status="raised", type=type(exc).__name__, message=str(exc)[:500])
        try:
            torch.cuda.synchronize()
        except Exception as exc:
            result["pending"] = str(exc)[:300]
        print(json.dumps(result), flush=True)
    """)


def _run_all():
    """Runs every case, a fresh child after each crash; returns name -> result."""
    codes = {name: code for name, (_, _, code) in CASES.items()}
    script = CHILD.format(path=PACKAGE_PATH, cases=json.dumps(codes))
    left, results = list(CASES), {}
    while left:
        proc = subprocess.run([sys.executable, "-c", script, json.dumps(left)], capture_output=True, text=True,
                              timeout=600, cwd=Path(__file__).parent)
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["name"]] = record
                started = None
        if started is None and proc.returncode != 0:  # died before its first case
            raise RuntimeError(f"the child failed before any case:\n{proc.stderr[-3000:]}")
        if started is not None:
            results[started] = {"name": started, "status": "crashed", "returncode": proc.returncode,
                                "stderr": proc.stderr[-1000:]}
        left = [name for name in left if name not in results]
    return results


@pytest.fixture(scope="module")
def results():
    return _run_all()


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_an_answer_or_a_clear_error(results, name):
    expect, words, _ = CASES[name]
    r = results[name]
    assert r["status"] != "crashed", f"{name} crashed the process: {r}"
    assert "pending" not in r, f"{name} left a CUDA error pending: {r['pending']}"
    assert r["status"] != "mismatch", f"{name} gave a result unlike torch's: {r['message']}"
    if expect == "match":
        assert r["status"] == "match", r
    elif expect == "error":
        assert r["status"] == "raised", f"{name} should raise, got {r}"
    if r["status"] == "raised":
        assert expect != "match", r
        message = r["message"].lower()
        assert any(w in message for w in words), f"{name}: the error names none of {words}: {r['message']}"
