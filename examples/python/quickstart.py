# SPDX-License-Identifier: Apache-2.0
"""reducekit from Python, as an installed package (`pip install --no-build-isolation .`): the
functional ops, a module drop-in, autograd, and a model patched in place. Needs a CUDA GPU.

    python examples/python/quickstart.py
"""
import torch

import reducekit


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("quickstart: no CUDA device (reducekit's operators run on CUDA tensors)")
    print("reducekit", reducekit.__version__)
    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    # The functional API takes torch's signatures.
    y = reducekit.softmax(x, dim=-1)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))
    y.float().pow(2).sum().backward()  # the backward is reducekit's kernel too
    print("softmax:", tuple(y.shape), y.dtype, "rows sum to", round(y[0].float().sum().item(), 4))

    w = torch.ones(4096, device="cuda")
    n = reducekit.rms_norm(x.detach(), [4096], w, eps=1e-6)
    print("rms_norm: output", n.dtype, "(the input's dtype, with a float32 weight)")

    loss = reducekit.cross_entropy(torch.randn(8, 32000, device="cuda"), torch.randint(0, 32000, (8,), device="cuda"))
    print("cross_entropy:", round(loss.item(), 4))

    # A model's modules replaced in place, parameters kept; what could not be replaced is reported.
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.LayerNorm(256)).cuda()
    inputs = torch.randn(4, 256, device="cuda")
    before = model(inputs)
    report = reducekit.patch(model)
    print("patched:", report)
    torch.testing.assert_close(model(inputs), before, rtol=1e-5, atol=1e-5)
    print("quickstart: ok")


if __name__ == "__main__":
    main()
