# SPDX-License-Identifier: Apache-2.0
"""Drop-in modules for torch.nn's, backed by reducekit's operators."""
import torch

from ._functional import log_softmax, softmax
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
