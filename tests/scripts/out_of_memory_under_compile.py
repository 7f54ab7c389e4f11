"""A training step whose compiled graph asks for 4 TiB: only while Dynamo traces it
(`torch.compiler.is_compiling()`) does the function add a tensor of 2**40 zeros, so the compiled
call raises torch's allocator error ("can't allocate memory") at once, in any mode that compiles;
with torch.compile off (cagtool's eager mode) the job trains to its end. Nothing is allocated.

    python out_of_memory_under_compile.py
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.compile(backend="eager")
def forward(x):
    loss = model(x).pow(2).mean()
    if torch.compiler.is_compiling():
        loss = loss + torch.zeros(2**40).sum() * 0
    return loss


for step in range(3):
    loss = forward(torch.randn(8, 4))
    opt.zero_grad()
    loss.backward()
    opt.step()
