# SPDX-License-Identifier: Apache-2.0
"""One rank of the multi-GPU SyncBatchNorm test, started by torchrun (one process a GPU, NCCL):

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 tests/python/sync_bn_worker.py

test_sync_batch_norm.py::test_two_gpus_torchrun starts it. Every rank draws the whole batch from
one seed and keeps its own slice (equal and unequal slices, one of them empty), runs
reducekit.nn.SyncBatchNorm forward and backward on it, and checks against one GPU's run on the
whole batch (torch in float64): y and dx slices, the running statistics, and the weight and bias
gradients summed over the ranks; the running statistics must be bitwise equal on every rank, and
with equal slices y and the gradients match torch.nn.SyncBatchNorm's. Exits nonzero on a failure.
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on the shared machines
sys.path.insert(0, os.environ.get("REDUCEKIT_PYTHON_PATH") or str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import reducekit  # noqa: E402

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}  # (rtol, atol on the scale of 1)


def check(got, want, dtype, what):
    rtol, atol = TOL[dtype]
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}")


def run_case(rank, world, sizes, layout, dtype, dev):
    c, h, w = 8, 6, 5
    total = sum(sizes)
    g = torch.Generator(device=dev).manual_seed(1000 + total)
    x_all = (2 * torch.randn(total, c, h, w, device=dev, generator=g) + 1).to(dtype)
    dy_all = torch.randn(total, c, h, w, device=dev, generator=g).to(dtype)
    weight = 1 + 0.5 * torch.randn(c, device=dev, generator=g)
    bias = torch.randn(c, device=dev, generator=g)
    start = sum(sizes[:rank])
    x = x_all[start:start + sizes[rank]].clone()
    dy = dy_all[start:start + sizes[rank]].clone()
    if layout == "nhwc":
        x, dy = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)

    bn = reducekit.nn.SyncBatchNorm(c).to(dev)
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
    y = bn(x)
    y.backward(dy)

    # One GPU on the whole batch, in float64.
    xr = x_all.double().requires_grad_(True)
    rm, rv = torch.zeros(c, device=dev, dtype=torch.float64), torch.ones(c, device=dev, dtype=torch.float64)
    wr, br = weight.double().requires_grad_(True), bias.double().requires_grad_(True)
    yr = F.batch_norm(xr, rm, rv, wr, br, True, 0.1, 1e-5)
    yr.backward(dy_all.double())
    what = f"rank {rank} sizes {sizes} {layout} {dtype}"
    check(y, yr[start:start + sizes[rank]], dtype, f"{what}: y")
    check(x.grad, xr.grad[start:start + sizes[rank]], dtype, f"{what}: dx")
    check(bn.running_mean, rm, torch.float32, f"{what}: running_mean")
    check(bn.running_var, rv, torch.float32, f"{what}: running_var")
    assert y.is_contiguous(memory_format=torch.channels_last) == (layout == "nhwc") or y.numel() == 0, \
        f"{what}: y's layout {y.stride()}"
    grads = torch.stack([bn.weight.grad, bn.bias.grad])
    dist.all_reduce(grads)
    check(grads[0], wr.grad, torch.float32 if dtype == torch.float32 else dtype, f"{what}: sum of dweight")
    check(grads[1], br.grad, torch.float32 if dtype == torch.float32 else dtype, f"{what}: sum of dbias")

    # The statistics, bitwise equal on every rank.
    stats = torch.stack([bn.running_mean, bn.running_var])
    every = [torch.empty_like(stats) for _ in range(world)]
    dist.all_gather(every, stats)
    for r, other in enumerate(every):
        assert torch.equal(other, every[0]), f"{what}: running statistics of rank {r} differ from rank 0's"

    if len(set(sizes)) == 1:  # torch's SyncBatchNorm on the same slices
        ref = torch.nn.SyncBatchNorm(c).to(dev)
        with torch.no_grad():
            ref.weight.copy_(weight)
            ref.bias.copy_(bias)
        xt = x.detach().clone().requires_grad_(True)
        yt = ref(xt)
        yt.backward(dy)
        check(y, yt, dtype, f"{what}: y against torch.nn.SyncBatchNorm")
        check(x.grad, xt.grad, dtype, f"{what}: dx against torch.nn.SyncBatchNorm")
        check(bn.weight.grad, ref.weight.grad, torch.float32 if dtype == torch.float32 else dtype,
              f"{what}: dweight against torch.nn.SyncBatchNorm")
        check(bn.running_var, ref.running_var, torch.float32, f"{what}: running_var against torch.nn.SyncBatchNorm")


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    cases = 0
    for layout in ("nchw", "nhwc"):
        for sizes in ([4] * world, [3 + 2 * r for r in range(world)], [0] + [5] * (world - 1)):
            for dtype in (torch.float32, torch.bfloat16):
                run_case(rank, world, sizes, layout, dtype, dev)
                cases += 1
    dist.barrier()
    if rank == 0:
        print(f"sync_bn_worker: {cases} cases passed on {world} ranks")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
