"""A training step whose compiled function breaks the graph under fullgraph=True: torch.compile raises
at its first call (Dynamo's Unsupported), with or without compiled autograd; with torch.compile off
(cagtool's eager mode) the job trains to its end.

    python fails_under_compile.py
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.compile(backend="eager", fullgraph=True)
def forward(x):
    y = model(x)
    torch._dynamo.graph_break()
    return y.pow(2).mean()


for step in range(3):
    loss = forward(torch.randn(8, 4))
    opt.zero_grad()
    loss.backward()
    opt.step()
