"""A recompile whose compile raises, ending the job (as torch's symbolic-shapes assert ended a
DeepSpeed ZeRO-2 rank under compiled autograd): a compiled model whose backend fails on its second
compile, which the smaller batch at the third step asks for."""

import torch
from torch import nn

compiles = [0]


def backend(gm, example_inputs):
    compiles[0] += 1
    if compiles[0] > 1:
        raise RuntimeError("the backend cannot compile this graph")
    return gm.forward


torch.manual_seed(0)
model = nn.Linear(8, 1)
compiled = torch.compile(model, backend=backend)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, rows in enumerate((8, 8, 4, 8)):
    opt.zero_grad()
    compiled(torch.randn(rows, 8)).pow(2).mean().backward()
    opt.step()
