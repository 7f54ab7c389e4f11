"""A model whose forward slices its nn.ModuleList (`self.layers[: self.depth]`, as every transformers
model's forward does): the slice is a new ModuleList, made by add_module inside the compiled forward,
where torch's global module-registration hooks run; and registers a forward hook on its first call
(as transformers' output capturing installs its hooks lazily), which Dynamo breaks the graph on.
Three steps under torch.compile (eager backend); torch's graph-break, graph and frame counters
printed last, as one JSON line."""

import json

import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.depth = 2
        self.hooked = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.hooked:
            self.layers[0].register_forward_hook(lambda module, args, output: None)
            self.hooked = True
        for layer in self.layers[: self.depth]:
            x = torch.relu(layer(x))
        return x


torch.manual_seed(0)
model = Stack()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    compiled(torch.randn(4, 8)).sum().backward()
    opt.step()

from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({"graph_breaks": sum(counters["graph_break"].values()), "reasons": sorted(counters["graph_break"]),
                  "unique_graphs": counters["stats"]["unique_graphs"], "frames": counters["frames"]["total"]}))
