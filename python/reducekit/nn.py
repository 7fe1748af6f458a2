# SPDX-License-Identifier: Apache-2.0
"""Drop-in modules for torch.nn's, backed by reducekit's operators."""
import torch

from ._batch_norm import batch_norm_module_forward
from ._functional import log_softmax, softmax
from ._loss import cross_entropy
from ._norm import layer_norm, rms_norm


class Softmax(torch.nn.Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return log_softmax(x, self.dim)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm (same parameters, same state dict) running reducekit.layer_norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm (same parameters, same state dict) running reducekit.rms_norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)


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


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """torch.nn.CrossEntropyLoss (same arguments and buffers) running reducekit.cross_entropy, with
    the z-loss and soft-capping extras as keyword arguments."""

    def __init__(self, *args, lse_square_scale: float = 0.0, softcap: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing,
                             lse_square_scale=self.lse_square_scale, softcap=self.softcap)
