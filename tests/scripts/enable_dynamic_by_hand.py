"""Compiled autograd enabled by the script itself, `compiled_autograd._enable(compiler_fn)` (dynamic by
default: its first graph takes its sizes as inputs), over a batch size that changes: Dynamo's compile
of that graph still specializes a size. Starting compiled autograd dynamic would change nothing."""

import torch, torch.nn as nn
from torch._dynamo import compiled_autograd
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def compiler_fn(gm):
    return torch.compile(gm, backend="eager", fullgraph=True)
for step, bs in enumerate([16, 16, 16, 8, 16, 16, 8, 16, 16, 16]):
    x, y = torch.randn(bs, 16), torch.randn(bs, 1)
    loss = nn.functional.mse_loss(cmodel(x), y)
    opt.zero_grad()
    with compiled_autograd._enable(compiler_fn):
        loss.backward()
    opt.step()
print("final", round(loss.item(), 4))
