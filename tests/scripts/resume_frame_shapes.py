"""A model whose forward calls a block that breaks the graph (a call Dynamo cannot trace, as
nn.TransformerEncoder's fast-path check is), sets an attribute on its first call (a mask, as
pytorch/examples' word_language_model does), and whose last batch is smaller: the frame that
resumes after the break gets the block's output as `___stack0`, a name Dynamo made, and its size
guard fails there. The block is in another file (graph_breaking_block.py), as a library's module
is. Prints torch's counters last."""

import json

import torch
from graph_breaking_block import Block


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(8, 1)
        self.mask = None

    def forward(self, x):
        if self.mask is None:
            mask = torch.ones(8)
            self.mask = mask
        h = self.block(x * self.mask)
        return self.head(h).pow(2).mean()


torch.manual_seed(0)
model = Model()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, rows in enumerate([6, 6, 6, 4, 6, 6]):
    opt.zero_grad()
    compiled(torch.randn(rows, 8)).backward()
    opt.step()
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
