# SPDX-License-Identifier: Apache-2.0
"""A language model's head and loss, one training step (forward and backward): reducekit.
linear_cross_entropy against torch's F.linear + F.cross_entropy, eager and compiled, in one run.

    python bench/linear_loss.py [--shapes 8192x4096x128256,...] [--dtype bf16] [--out DIR]

The step is GEMM-bound, so it is reported as time (median of triton.testing.do_bench, L2 flushed,
gradients set to None between calls) and as the ratio to torch eager, with the peak device memory a
step takes beyond its inputs and the gradients it returns ("extra"), beside the full logits' size.
The loss and both gradients are checked against torch's eager step (largest error relative to the
largest value). Writes linear_loss.json to --out.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import reducekit  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def torch_step(hidden, weight, target):
    return F.cross_entropy(F.linear(hidden, weight), target)


def reducekit_step(hidden, weight, target):
    return reducekit.linear_cross_entropy(hidden, weight, target)


def measure(loss_fn, hidden, weight, target):
    """(median ms, peak extra bytes, loss, dhidden, dweight) of loss_fn(...).backward()."""
    h = hidden.detach().clone().requires_grad_()
    w = weight.detach().clone().requires_grad_()

    def step():
        h.grad = w.grad = None
        loss = loss_fn(h, w, target)
        loss.backward()
        return loss

    step()  # compiles and workspaces happen here
    h.grad = w.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = step()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before - h.grad.nbytes - w.grad.nbytes
    result = (loss.detach().float(), h.grad.clone(), w.grad.clone())
    ms = triton.testing.do_bench(step, warmup=25, rep=200, grad_to_none=[h, w], return_mode="median")
    return ms, extra, *result


def relative_error(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="8192x4096x128256,4096x4096x151936,8192x2048x50257")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    impls = {"reducekit": reducekit_step, "torch": torch_step}
    if not args.no_compile:
        impls["torch.compile"] = torch.compile(torch_step, dynamic=False)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}")
    print(f"{'M x H x V':>22} {'impl':>14} {'ms':>8} {'x eager':>8} {'extra MiB':>10} {'logits MiB':>10} "
          f"{'err loss':>9} {'err dh':>9} {'err dw':>9}")
    rows = []
    for text in args.shapes.split(","):
        m, h, v = (int(s) for s in text.split("x"))
        g = torch.Generator(device="cuda").manual_seed(0)
        hidden = torch.randn(m, h, device="cuda", generator=g).to(dtype)
        weight = (torch.randn(v, h, device="cuda", generator=g) / h ** 0.5).to(dtype)
        target = torch.randint(0, v, (m,), device="cuda", generator=g)
        logits_mib = m * v * hidden.element_size() / 2**20
        results = {}
        for name, fn in impls.items():
            torch._dynamo.reset()
            results[name] = measure(fn, hidden, weight, target)
        eager = results["torch"]
        for name, (ms, extra, loss, dh, dw) in results.items():
            row = {"shape": [m, h, v], "dtype": args.dtype, "impl": name, "ms": ms, "x_eager": eager[0] / ms,
                   "extra_mib": extra / 2**20, "logits_mib": logits_mib, "err_loss": relative_error(loss, eager[2]),
                   "err_dhidden": relative_error(dh, eager[3]), "err_dweight": relative_error(dw, eager[4])}
            rows.append(row)
            print(f"{text:>22} {name:>14} {ms:8.2f} {row['x_eager']:8.2f} {row['extra_mib']:10.0f} "
                  f"{logits_mib:10.0f} {row['err_loss']:9.1e} {row['err_dhidden']:9.1e} {row['err_dweight']:9.1e}")
        del hidden, weight, target, results
        torch.cuda.empty_cache()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "linear_loss.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
