# SPDX-License-Identifier: Apache-2.0
"""Drop-in modules for torch.nn's, backed by reducekit's operators."""
from typing import Optional, Tuple

import torch

from ._batch_norm import batch_norm, batch_norm_module_forward, module_statistics
from ._softmax import log_softmax, softmax
from ._linear_loss import linear_cross_entropy
from ._loss import cross_entropy
from ._norm import _rms_eps, add_layer_norm, add_rms_norm, layer_norm, rms_norm
from ._sync_batch_norm import sync_batch_norm


class Softmax(torch.nn.Softmax):
    """torch.nn.Softmax running reducekit.softmax; the default dim is -1 (torch's None picks a dim
    by the input's rank, a deprecated form reducekit does not take)."""

    def __init__(self, dim: int = -1):
        super().__init__(dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return softmax(input, self.dim)


class LogSoftmax(torch.nn.LogSoftmax):
    """torch.nn.LogSoftmax running reducekit.log_softmax; the default dim is -1."""

    def __init__(self, dim: int = -1):
        super().__init__(dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return log_softmax(input, self.dim)


class _NormOptions:
    """The norm modules' keyword-only options beyond torch's, plain attributes (not in the state
    dict): out_dtype (y's dtype; None: the input's) and, on the Add* modules, residual_in_float32
    (the residual stream kept in float32: reducekit.add_rms_norm's). A torch module patched in place
    (reducekit.patch changes its class, not its attributes) has neither: the defaults."""

    def _out_dtype(self) -> Optional[torch.dtype]:
        return getattr(self, "out_dtype", None)

    def _residual_in_float32(self) -> bool:
        return getattr(self, "residual_in_float32", False)

    def extra_repr(self) -> str:
        options = [super().extra_repr()]
        if self._out_dtype() is not None:
            options.append(f"out_dtype={self._out_dtype()}")
        if self._residual_in_float32():
            options.append("residual_in_float32=True")
        return ", ".join(options)


class LayerNorm(_NormOptions, torch.nn.LayerNorm):
    """torch.nn.LayerNorm (same parameters, same state dict) running reducekit.layer_norm;
    keyword-only out_dtype (_NormOptions)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, out_dtype: Optional[torch.dtype] = None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)
        self.out_dtype = out_dtype

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps, out_dtype=self._out_dtype())


class _RMSNormOptions(_NormOptions):
    """reducekit's RMSNorm options beyond torch's, keyword-only so that torch.nn.RMSNorm's
    positional arguments (device, dtype) keep their places:

    - bias: y = rms_norm(x) * scale + bias, fused. As torch.nn.LayerNorm's, it exists only with
      elementwise_affine, starts at zero, and is in the state dict only when present.
    - weight_offset: the scale is weight_offset + weight (Gemma's `1 + weight` at 1.0), taken in
      float32 from a 16-bit weight; the weight starts at 1 - weight_offset, so the scale starts
      at one, and checkpoints that store the offset form load as they are.
    - round_before_weight: the normalized value is rounded to the input's dtype before the scale
      multiplies it, with torch's type promotion (Llama's `weight * normed.to(input_dtype)`), and
      out_dtype, where given, converts that product: a second elementwise step after the kernel,
      as that rounding requires.

    Without them the module and its state dict are torch's. A torch.nn.RMSNorm patched in place
    (reducekit.patch changes its class, not its attributes) has none of them: the defaults."""

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True, device=None,
                 dtype=None, *, bias: bool = False, weight_offset: float = 0.0, round_before_weight: bool = False,
                 out_dtype: Optional[torch.dtype] = None):
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)  # torch.nn.RMSNorm's
        if weight_offset and not elementwise_affine:
            raise ValueError(f"weight_offset: {weight_offset} needs a weight (elementwise_affine=True)")
        self.weight_offset = float(weight_offset)
        self.round_before_weight = bool(round_before_weight)
        self.out_dtype = out_dtype
        if bias and self.elementwise_affine:
            self.bias = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()  # torch's __init__ ran it before the options existed

    def _bias(self) -> Optional[torch.Tensor]:
        return getattr(self, "bias", None)

    def _weight_offset(self) -> float:
        return getattr(self, "weight_offset", 0.0)

    def _round_before_weight(self) -> bool:
        return getattr(self, "round_before_weight", False)

    def reset_parameters(self) -> None:
        super().reset_parameters()  # torch's: the weight at one
        if self.weight is not None and self._weight_offset():
            with torch.no_grad():
                self.weight.fill_(1.0 - self._weight_offset())
        if self._bias() is not None:
            torch.nn.init.zeros_(self.bias)

    def _scale(self) -> Optional[torch.Tensor]:
        """What multiplies the normalized value: the weight, or weight_offset + weight (in the
        weight's dtype where the product is rounded apart, else in float32 from a 16-bit weight)."""
        w, offset = self.weight, self._weight_offset()
        if w is None or not offset:
            return w
        if not self._round_before_weight() and w.dtype in (torch.float16, torch.bfloat16):
            w = w.float()
        return w + offset

    def _scaled(self, normed: torch.Tensor) -> torch.Tensor:
        """round_before_weight's second step: normed, in the input's dtype, times the scale (torch's
        promotion), plus the bias; out_dtype, where given, is y's dtype still."""
        scale, bias = self._scale(), self._bias()
        y = normed if scale is None else scale * normed
        if bias is not None:
            y = y + bias
        return y if self._out_dtype() is None else y.to(self._out_dtype())

    def _norm(self, x: torch.Tensor, eps: Optional[float]) -> torch.Tensor:
        """y of x under the module's options (residual=None's y for AddRMSNorm)."""
        if self._round_before_weight():
            return self._scaled(rms_norm(x, self.normalized_shape, None, eps))
        return rms_norm(x, self.normalized_shape, self._scale(), eps, self._bias(), out_dtype=self._out_dtype())

    def extra_repr(self) -> str:
        options = [super().extra_repr()]
        if self._bias() is not None:
            options.append("bias=True")
        if self._weight_offset():
            options.append(f"weight_offset={self._weight_offset()}")
        if self._round_before_weight():
            options.append("round_before_weight=True")
        return ", ".join(options)


class RMSNorm(_RMSNormOptions, torch.nn.RMSNorm):
    """torch.nn.RMSNorm (same parameters, same state dict) running reducekit.rms_norm; keyword-only
    bias, weight_offset, round_before_weight (_RMSNormOptions) and out_dtype (_NormOptions)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x, self.eps)


class AddLayerNorm(LayerNorm):
    """The pre-norm residual step in one kernel: forward(input, residual) returns
    (layer_norm(input + residual), input + residual), the sum rounded to input's dtype before it is
    normalized (as the unfused `s = input + residual; y = norm(s)` in input's dtype), or kept in
    float32 with residual_in_float32=True (keyword-only, as out_dtype: _NormOptions).
    torch.nn.LayerNorm's arguments, parameters and state dict. residual=None (the first block of a
    stack) gives (layer_norm(input), input), input in float32 with residual_in_float32."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, residual_in_float32: bool = False,
                 out_dtype: Optional[torch.dtype] = None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype, out_dtype=out_dtype)
        self.residual_in_float32 = residual_in_float32

    def forward(self, input: torch.Tensor, residual: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if residual is None:  # y from input itself: the float32 stream's start is input, exactly
            y = layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps, out_dtype=self._out_dtype())
            return y, _stream_start(input, self._residual_in_float32())
        return add_layer_norm(input, residual, self.normalized_shape, self.weight, self.bias, self.eps,
                              residual_in_float32=self._residual_in_float32(), out_dtype=self._out_dtype())


class AddRMSNorm(_RMSNormOptions, torch.nn.RMSNorm):
    """forward(input, residual) returns (rms_norm(input + residual), input + residual) in one
    kernel, as AddLayerNorm does; torch.nn.RMSNorm's arguments, parameters and state dict
    (eps=None: the epsilon of the sum's dtype), RMSNorm's keyword options (_RMSNormOptions) and
    residual_in_float32 (_NormOptions). residual=None gives (rms_norm(input), input), input in
    float32 with residual_in_float32."""

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True, device=None,
                 dtype=None, *, bias: bool = False, weight_offset: float = 0.0, round_before_weight: bool = False,
                 residual_in_float32: bool = False, out_dtype: Optional[torch.dtype] = None):
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype, bias=bias,
                         weight_offset=weight_offset, round_before_weight=round_before_weight, out_dtype=out_dtype)
        self.residual_in_float32 = residual_in_float32

    def forward(self, input: torch.Tensor, residual: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if residual is None:  # y from input itself: the float32 stream's start is input, exactly
            s = _stream_start(input, self._residual_in_float32())
            return self._norm(input, self.eps if self.eps is not None else _rms_eps(s, None)), s  # the stream's eps
        if self._round_before_weight():
            normed, s = add_rms_norm(input, residual, self.normalized_shape, None, self.eps, None,
                                     residual_in_float32=self._residual_in_float32())
            return self._scaled(normed), s
        return add_rms_norm(input, residual, self.normalized_shape, self._scale(), self.eps, self._bias(),
                            residual_in_float32=self._residual_in_float32(), out_dtype=self._out_dtype())


def _stream_start(input: torch.Tensor, residual_in_float32: bool) -> torch.Tensor:
    """The residual stream a stack's first block starts: input, in float32 when the stream is
    (float64 stays)."""
    return input.float() if residual_in_float32 and input.dtype in (torch.float16, torch.bfloat16) else input


class BatchNorm1d(torch.nn.BatchNorm1d):
    """torch.nn.BatchNorm1d (same parameters, buffers and state dict) running reducekit.batch_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return batch_norm_module_forward(self, input)


class BatchNorm2d(torch.nn.BatchNorm2d):
    """torch.nn.BatchNorm2d (same parameters, buffers and state dict) running reducekit.batch_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return batch_norm_module_forward(self, input)


class BatchNorm3d(torch.nn.BatchNorm3d):
    """torch.nn.BatchNorm3d (same parameters, buffers and state dict) running reducekit.batch_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return batch_norm_module_forward(self, input)


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """torch.nn.SyncBatchNorm (same arguments, including process_group, parameters, buffers and
    state dict) running reducekit.sync_batch_norm: in training, under an initialized
    torch.distributed with more than one rank in the group, the batch statistics are those of
    every rank's input, bitwise equal on every rank; in eval, without torch.distributed, or in a
    group of one rank it is BatchNorm (reducekit.batch_norm). Batch sizes may differ between
    ranks, 0 included. weight and bias gradients are the rank's own, as torch's."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        check_channels = getattr(self, "_check_non_zero_input_channels", None)
        if check_channels is not None:
            check_channels(input)
        running_mean, running_var, use_batch, factor = module_statistics(self)
        group = None
        if use_batch and self.training and torch.distributed.is_available() and torch.distributed.is_initialized():
            group = self.process_group if self.process_group is not None else torch.distributed.group.WORLD
            if torch.distributed.get_world_size(group) <= 1:
                group = None
        if group is None:
            return batch_norm(input, running_mean, running_var, self.weight, self.bias, use_batch, factor, self.eps)
        return sync_batch_norm(input, running_mean, running_var, self.weight, self.bias, factor, self.eps, group)

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module, process_group=None) -> torch.nn.Module:
        """module with every BatchNorm*d in it (torch's, torch's SyncBatchNorm, reducekit's)
        replaced by a reducekit SyncBatchNorm over process_group that holds the same Parameters
        and buffers (shared, not copied) and the same training flag; returns the new root."""
        converted = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(module, cls):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
            if hasattr(module, "qconfig"):
                converted.qconfig = module.qconfig
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """torch.nn.CrossEntropyLoss (same arguments and buffers) running reducekit.cross_entropy:
    class-index targets on the fused kernels, class-probability targets (a floating-point target
    of the input's shape) on fused kernels too where of the input's dtype, and the extras as
    keyword arguments: the z-loss (lse_square_scale), soft-capping (softcap) and check_targets
    (one host sync raising ValueError on a class index outside [0, C) that is not ignore_index;
    a graph break under torch.compile). See reducekit.cross_entropy."""

    # Class-level defaults, so that a torch.nn.CrossEntropyLoss whose class reducekit.patch swapped
    # (it never ran this __init__) computes torch's loss.
    lse_square_scale = 0.0
    softcap = 0.0
    check_targets = False

    def __init__(self, *args, lse_square_scale: float = 0.0, softcap: float = 0.0, check_targets: bool = False,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self.check_targets = check_targets

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing,
                             lse_square_scale=self.lse_square_scale, softcap=self.softcap,
                             check_targets=self.check_targets)


class LinearCrossEntropyLoss(torch.nn.Linear):
    """A language model's head and its loss in one: torch.nn.Linear(in_features, out_features, bias)
    (same parameters, initialization and state dict) whose forward(hidden, target) returns
    cross_entropy(linear(hidden), target) by reducekit.linear_cross_entropy, never holding the logits
    of all rows at once. The loss options are CrossEntropyLoss's (class_weight is its `weight`) plus
    the extras of reducekit.cross_entropy and chunk_rows.

        loss_fn = reducekit.nn.LinearCrossEntropyLoss.from_linear(model.lm_head)  # shares its weight
        loss = loss_fn(hidden, target)   # in place of cross_entropy(model.lm_head(hidden), target)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 class_weight: Optional[torch.Tensor] = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, lse_square_scale: float = 0.0, softcap: float = 0.0,
                 chunk_rows: Optional[int] = None, check_targets: bool = False):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.register_buffer("class_weight", class_weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self.chunk_rows = chunk_rows
        self.check_targets = check_targets

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, **loss_options) -> "LinearCrossEntropyLoss":
        """A loss over linear's own weight and bias Parameters (not copies: training either trains
        both, and a weight tied to an embedding stays tied)."""
        module = cls(linear.in_features, linear.out_features, linear.bias is not None, device="meta",
                     dtype=linear.weight.dtype, **loss_options)
        module.weight = linear.weight
        module.bias = linear.bias
        return module

    def forward(self, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(hidden, self.weight, target, self.bias, self.class_weight, self.ignore_index,
                                    self.reduction, self.label_smoothing, lse_square_scale=self.lse_square_scale,
                                    softcap=self.softcap, chunk_rows=self.chunk_rows,
                                    check_targets=self.check_targets)
