import torch
class Softmax(torch.nn.Module):
    def __init__(self, dim=-1):
        super().__init__(); self.dim = dim
    def forward(self, x):
        import reducekit
        return reducekit.softmax(x, self.dim)
class LogSoftmax(Softmax):
    def forward(self, x):
        import reducekit
        return reducekit.log_softmax(x, self.dim)
