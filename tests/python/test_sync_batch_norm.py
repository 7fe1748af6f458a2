# SPDX-License-Identifier: Apache-2.0
"""reducekit.sync_batch_norm and reducekit.nn.SyncBatchNorm.

In this process: a torch.distributed NCCL group of one rank (a file:// store), where the sync
path (moments packet -> all_gather_into_tensor -> rank-order merge -> apply, and the backward's
gradient-sum packets) must give what reducekit.batch_norm gives on the same batch, and the module
what torch.nn.SyncBatchNorm gives; convert_sync_batchnorm. On two GPUs or more:
sync_bn_worker.py under torchrun (equal and unequal batch sizes, one rank empty, NCHW and
channels-last, against one GPU's run on the whole batch, statistics bitwise equal on every rank);
skipped with a message on fewer GPUs. NCCL_NVLS_ENABLE=0 throughout. conftest.py skips this
module, with the reason, where torch, a GPU or a built reducekit is missing.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import reducekit
from conftest import PACKAGE_PATH

os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off on the shared machines

DEV = "cuda"
WORKER = Path(__file__).resolve().parent / "sync_bn_worker.py"
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.float16: (2e-3, 2e-3),
       torch.bfloat16: (1e-2, 1e-2)}


def check(got, want, dtype, what):
    rtol, atol = TOL[dtype]
    scale = max(1.0, float(want.detach().abs().max())) if want.numel() else 1.0
    torch.testing.assert_close(got.detach().double(), want.detach().double(), rtol=rtol, atol=atol * scale,
                               msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    """The default process group: NCCL, this process as its only rank."""
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("torch.distributed with NCCL is not available in this torch build")
    if dist.is_initialized():
        pytest.skip("torch.distributed is already initialized in this process")
    torch.cuda.set_device(0)
    store = tmp_path_factory.mktemp("sync_bn") / "store"
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def make_input(shape, dtype, layout, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (1.5 * torch.randn(shape, device=DEV, generator=g, dtype=torch.float64) + 2).to(dtype)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    return x


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_sync_path_matches_batch_norm(one_rank_group, dtype, layout):
    """The stages and the two gathers on one rank give batch_norm's forward and backward."""
    shape = (6, 16, 9, 7)
    pdt = torch.float64 if dtype == torch.float64 else torch.float32
    x = make_input(shape, dtype, layout)
    dy = make_input(shape, dtype, layout, seed=1) - 2
    w = (1 + 0.3 * torch.randn(shape[1], device=DEV)).to(pdt)
    b = torch.randn(shape[1], device=DEV).to(pdt)
    runs = []
    for fn in ("sync", "single"):
        xi, wi, bi = x.clone().requires_grad_(True), w.clone().requires_grad_(True), b.clone().requires_grad_(True)
        rm, rv = torch.zeros(shape[1], device=DEV, dtype=pdt), torch.ones(shape[1], device=DEV, dtype=pdt)
        if fn == "sync":
            y = reducekit.sync_batch_norm(xi, rm, rv, wi, bi, 0.1, 1e-5, process_group=one_rank_group)
        else:
            y = reducekit.batch_norm(xi, rm, rv, wi, bi, True, 0.1, 1e-5)
        y.backward(dy)
        runs.append((y, rm, rv, xi.grad, wi.grad, bi.grad))
    names = ("y", "running_mean", "running_var", "dx", "dweight", "dbias")
    for name, got, want in zip(names, runs[0], runs[1]):
        check(got, want, dtype if name in ("y", "dx") else pdt, name)
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, batch_norm's {want.dtype}"
    assert runs[0][0].stride() == x.stride(), f"y: strides {runs[0][0].stride()} for x's {x.stride()}"


def test_sync_path_empty_batch(one_rank_group):
    """A rank with no samples takes part: y and dx empty, running statistics untouched (the
    whole group's batch is empty here)."""
    x = torch.empty(0, 4, 3, 3, device=DEV, requires_grad=True)
    rm, rv = torch.full((4,), 0.5, device=DEV), torch.full((4,), 2.0, device=DEV)
    y = reducekit.sync_batch_norm(x, rm, rv, process_group=one_rank_group)
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(rm, torch.full((4,), 0.5, device=DEV)) and torch.equal(rv, torch.full((4,), 2.0, device=DEV))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_module_matches_torch_sync_batch_norm(one_rank_group, layout):
    """Same state dict, same forward and backward as torch.nn.SyncBatchNorm (a group of one rank
    runs BatchNorm in both), train and eval; the state dict loads both ways."""
    torch.manual_seed(0)
    ref = torch.nn.SyncBatchNorm(12, momentum=None).to(DEV)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    mine = reducekit.nn.SyncBatchNorm(12, momentum=None).to(DEV)
    mine.load_state_dict(ref.state_dict())
    for step in range(2):
        x = make_input((5, 12, 6, 6), torch.float32, layout, seed=step)
        dy = torch.randn_like(x)
        outs = []
        for module in (mine, ref):
            xi = x.clone().requires_grad_(True)
            module.zero_grad()
            y = module(xi)
            y.backward(dy)
            outs.append((y, xi.grad, module.weight.grad, module.bias.grad))
        for name, got, want in zip(("y", "dx", "dweight", "dbias"), *outs):
            check(got, want, torch.float32, f"step {step} {name}")
    for key, value in ref.state_dict().items():
        check(mine.state_dict()[key], value, torch.float32 if value.is_floating_point() else torch.float64, key)
    mine.eval()
    ref.eval()
    x = make_input((3, 12, 4, 4), torch.float32, layout, seed=9)
    check(mine(x), ref(x), torch.float32, "eval y")
    ref.load_state_dict(mine.state_dict())


def test_convert_sync_batchnorm():
    """Every BatchNorm*d (torch's, torch's SyncBatchNorm, reducekit's) becomes a reducekit
    SyncBatchNorm holding the same Parameters and buffers; other modules stay."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                              torch.nn.Sequential(reducekit.nn.BatchNorm1d(8, affine=False), torch.nn.SyncBatchNorm(8)),
                              torch.nn.BatchNorm3d(8, track_running_stats=False)).to(DEV)
    net[1].eval()
    weight = net[1].weight
    keys = set(net.state_dict())
    out = reducekit.nn.SyncBatchNorm.convert_sync_batchnorm(net, process_group=None)
    kinds = [type(m) for m in (out[1], out[2][0], out[2][1], out[3])]
    assert kinds == [reducekit.nn.SyncBatchNorm] * 4, kinds
    assert isinstance(out[0], torch.nn.Conv2d)
    assert out[1].weight is weight, "the Parameter is shared, not copied"
    assert not out[1].training and out[2][0].training
    assert not out[2][0].affine and out[3].running_mean is None
    assert set(out.state_dict()) == keys
    lone = reducekit.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm2d(4))
    assert type(lone) is reducekit.nn.SyncBatchNorm


def test_two_gpus_torchrun():
    """sync_bn_worker.py on two GPUs under torchrun, one process a GPU."""
    if torch.cuda.device_count() < 2:
        pytest.skip(f"{torch.cuda.device_count()} CUDA device(s): the two-GPU SyncBatchNorm test needs two")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", REDUCEKIT_PYTHON_PATH=PACKAGE_PATH,
               PYTHONPATH=os.pathsep.join(filter(None, [PACKAGE_PATH, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert "cases passed on 2 ranks" in done.stdout, done.stdout[-4000:]
