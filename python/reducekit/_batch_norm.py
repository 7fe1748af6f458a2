# SPDX-License-Identifier: Apache-2.0
"""batch_norm: torch.nn.functional.batch_norm's signature on reducekit's kernels.

    y = reducekit.batch_norm(input, running_mean, running_var, weight=None, bias=None,
                             training=False, momentum=0.1, eps=1e-5)

input: [N, C, *spatial] (rank 2 to 5), contiguous or channels-last (y keeps the layout; any
other layout is read through a contiguous copy). In training the statistics are the batch's
(per channel over N and the spatial dims, merged in a fixed order: deterministic) and the
running statistics, when given, are updated in place (the variance unbiased); otherwise the
running statistics normalize. weight, bias and the running statistics are float32 for 16-bit
input, as torch's modules keep them (other dtypes go through a float copy).

The kernels are torch.ops.reducekit.batch_norm and batch_norm_backward
(python/csrc/batch_norm_ops.cpp, autograd in C++ there).
"""
import math

import torch

_ops = torch.ops.reducekit


def _channel_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _channels_last_dense(x):
    """C innermost, then the spatial dims in order, then N (the layout the kernels read besides
    the contiguous one)."""
    if x.dim() < 2:
        return False
    expected = 1
    for d in [1] + list(range(x.dim() - 1, 1, -1)) + [0]:
        if x.shape[d] == 1:
            continue
        if x.stride(d) != expected:
            return False
        expected *= x.shape[d]
    return True


def _readable_like(x):
    """An empty tensor laid out as the kernels read x (python/csrc/batch_norm_ops.cpp, readable)."""
    if x.is_contiguous() or _channels_last_dense(x):
        return torch.empty_like(x)
    fmt = torch.contiguous_format
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        fmt = torch.channels_last
    elif x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        fmt = torch.channels_last_3d
    return torch.empty_like(x, memory_format=fmt)


@torch.library.register_fake("reducekit::batch_norm")
def _batch_norm_fake(input, weight, bias, running_mean, running_var, training, momentum, eps):
    channels = input.shape[1]
    stat = input.new_empty((channels,), dtype=_channel_dtype(input))
    return _readable_like(input), stat, torch.empty_like(stat)


@torch.library.register_fake("reducekit::batch_norm_backward")
def _batch_norm_backward_fake(grad_out, input, weight, save_mean, save_invstd, training, output_mask):
    channels = input.shape[1]
    dtype = _channel_dtype(input)
    dx = _readable_like(input) if output_mask[0] else input.new_empty((0,))
    dweight = input.new_empty((channels if output_mask[1] else 0,), dtype=dtype)
    dbias = input.new_empty((channels if output_mask[2] else 0,), dtype=dtype)
    return dx, dweight, dbias


def _verify_batch_size(shape):
    """torch's check: training statistics need more than one value per channel."""
    values = shape[0] * math.prod(shape[2:]) if len(shape) >= 2 else 0
    if values == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(shape)}")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm."""
    if not isinstance(momentum, (int, float)):  # the modules' momentum=None (a cumulative average) is theirs
        raise TypeError(f"momentum: expected a number, got {type(momentum).__name__}")
    if training:
        _verify_batch_size(input.shape)
    return _ops.batch_norm(input, weight, bias, running_mean, running_var, bool(training), float(momentum),
                           float(eps))[0]


def module_statistics(module):
    """torch's _BatchNorm bookkeeping for one forward of `module` (num_batches_tracked counted):
    (running_mean, running_var, use_batch, factor) as batch_norm takes them; batch statistics in
    training or without running stats, momentum=None the cumulative average."""
    factor = 0.0 if module.momentum is None else module.momentum
    if module.training and module.track_running_stats and module.num_batches_tracked is not None:
        module.num_batches_tracked.add_(1)
        factor = 1.0 / float(module.num_batches_tracked) if module.momentum is None else module.momentum
    use_batch = module.training or (module.running_mean is None and module.running_var is None)
    keep = not module.training or module.track_running_stats
    return (module.running_mean if keep else None, module.running_var if keep else None, use_batch, factor)


def batch_norm_module_forward(module, input):
    """torch's _BatchNorm.forward on reducekit.batch_norm."""
    module._check_input_dim(input)
    running_mean, running_var, use_batch, factor = module_statistics(module)
    return batch_norm(input, running_mean, running_var, module.weight, module.bias, use_batch, factor, module.eps)


__all__ = ["batch_norm"]
