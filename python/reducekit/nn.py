"""Drop-in modules for torch.nn's, backed by reducekit's operators."""
import torch

from ._functional import log_softmax, softmax


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
