"""A compiled model fed sequences one token longer every step (a length that grows, as a
curriculum or a generation loop does): the forward recompiles once at step 1 and is dynamic
from then on; compiled autograd captures the backward again at step 1 for the new sizes, and
Dynamo compiles that graph's code for the sizes of its first call, so it recompiles it at step 2,
a step in which no forward was recompiled."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    x = torch.randn(4, 6 + step, 8)
    loss = compiled(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
