"""A compiled forward recompiled for two reasons, each followed by a new backward: an attribute
the first call sets (as an HF model sets config.problem_type), then a shorter last batch. Each
forward recompile gives the backward a new CompiledFunctionBackward at the same place."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.kind = None

    def forward(self, x):
        if self.kind is None:
            self.kind = "regression"
        return self.lin(x).relu()


torch.manual_seed(0)
net = Net()
model = torch.compile(net, backend="aot_eager")
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for rows in (8, 8, 8, 3):
    opt.zero_grad()
    model(torch.randn(rows, 4)).sum().backward()
    opt.step()
print("trained 4 steps")
