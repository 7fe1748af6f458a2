# SPDX-License-Identifier: Apache-2.0
"""sync_batch_norm: batch_norm in training over a batch spread across the ranks of a
torch.distributed process group (one rank a GPU, NCCL backend), the engine of
reducekit.nn.SyncBatchNorm.

    y = reducekit.sync_batch_norm(input, running_mean, running_var, weight=None, bias=None,
                                  momentum=0.1, eps=1e-5, process_group=None)

Forward: each rank's per-channel moments packet (count, mean, M2; float64 [C, 3]) ->
all_gather_into_tensor -> a merge of the [R, C, 3] packets in rank order (Chan's formula) into
the batch mean and invstd, the running statistics updated (the variance unbiased over the total
count) -> y. Backward: each rank's (count, sum(dy), sum(dy * xhat)) -> all_gather -> dx with the
statistics' dependence on every rank's input. weight and bias receive the rank's own sums, as
torch.nn.SyncBatchNorm gives them (DistributedDataParallel reduces parameter gradients). The
merge is a fixed-order function of the gathered packets, so the statistics are bitwise equal on
every rank. Ranks may hold different batch sizes, 0 included; every rank must call it (and run
its backward) in the same order, as with any collective.

The stages are torch.ops.reducekit.batch_norm_moments, batch_norm_merge_moments,
batch_norm_apply, batch_norm_backward_sums and batch_norm_backward_apply
(python/csrc/batch_norm_ops.cpp; C++: <reducekit/batch_norm.hpp>).
"""
import torch
import torch.distributed as dist

from ._batch_norm import _channel_dtype, _readable_like

_ops = torch.ops.reducekit
_PACKET_WIDTH = 3  # count, then two moments or sums


def _packet_like(input):
    return input.new_empty((input.shape[1], _PACKET_WIDTH), dtype=torch.float64)


@torch.library.register_fake("reducekit::batch_norm_moments")
def _moments_fake(input):
    return _packet_like(input)


@torch.library.register_fake("reducekit::batch_norm_merge_moments")
def _merge_moments_fake(input, packets, running_mean, running_var, momentum, eps):
    stat = input.new_empty((packets.shape[1],), dtype=_channel_dtype(input))
    return stat, torch.empty_like(stat)


@torch.library.register_fake("reducekit::batch_norm_apply")
def _apply_fake(input, weight, bias, mean, invstd):
    return _readable_like(input)


@torch.library.register_fake("reducekit::batch_norm_backward_sums")
def _backward_sums_fake(grad_out, input, save_mean, save_invstd):
    return _packet_like(input)


@torch.library.register_fake("reducekit::batch_norm_backward_apply")
def _backward_apply_fake(grad_out, input, weight, save_mean, save_invstd, packets):
    return _readable_like(input)


def _gather(packet, group, world_size):
    """Every rank's packet, [R, C, 3] in rank order."""
    gathered = packet.new_empty((world_size,) + tuple(packet.shape))
    dist.all_gather_into_tensor(gathered, packet.contiguous(), group=group)
    return gathered


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, momentum, eps, group, world_size):
        packets = _gather(_ops.batch_norm_moments(input), group, world_size)
        mean, invstd = _ops.batch_norm_merge_moments(input, packets, running_mean, running_var, momentum, eps)
        y = _ops.batch_norm_apply(input, weight, bias, mean, invstd)
        ctx.save_for_backward(input, weight, mean, invstd)
        ctx.group = group
        ctx.world_size = world_size
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, grad_y):
        input, weight, mean, invstd = ctx.saved_tensors
        packet = _ops.batch_norm_backward_sums(grad_y, input, mean, invstd)
        dx = dweight = dbias = None
        if ctx.needs_input_grad[0]:
            packets = _gather(packet, ctx.group, ctx.world_size)
            dx = _ops.batch_norm_backward_apply(grad_y, input, weight, mean, invstd, packets)
        if ctx.needs_input_grad[1]:
            dweight = packet[:, 2].to(weight.dtype)
        if ctx.needs_input_grad[2]:
            dbias = packet[:, 1].to(ctx.bias_dtype)
        return dx, dweight, dbias, None, None, None, None, None, None


def sync_batch_norm(input, running_mean, running_var, weight=None, bias=None, momentum=0.1, eps=1e-5,
                    process_group=None):
    """Training batch_norm with the statistics of every rank's input (see the module docstring).
    process_group: None for the default group. Needs torch.distributed initialized."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("sync_batch_norm: torch.distributed is not initialized (init_process_group first)")
    if not isinstance(momentum, (int, float)):
        raise TypeError(f"momentum: expected a number, got {type(momentum).__name__}")
    if input.dim() < 2:
        raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_var: running_mean and running_var come together (both or neither)")
    group = process_group if process_group is not None else dist.group.WORLD
    world_size = dist.get_world_size(group)
    return _SyncBatchNormFunction.apply(input, weight, bias, running_mean, running_var, float(momentum), float(eps),
                                        group, world_size)


__all__ = ["sync_batch_norm"]
