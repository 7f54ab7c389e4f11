"""A block checkpointed inside a compiled forward (non-reentrant) whose checkpointed function mutates
an object from outside it (a counter, as a library's context variable): Dynamo cannot trace the
checkpoint as one region and breaks the graph inside it."""
import json, sys
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Calls:
    def __init__(self):
        self.n = 0


calls = Calls()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def inner(self, x):
        calls.n = 1  # a side effect outside the checkpointed region (a flag a library sets)
        return self.b(torch.relu(self.a(x)))

    def forward(self, x):
        return checkpoint(self.inner, x, use_reentrant=False)


torch.manual_seed(0)
model = nn.Sequential(Block(), Block())
skip = "--skip-side-effects" in sys.argv
if skip:
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(4):
    opt.zero_grad()
    compiled(torch.randn(8, 16)).sum().backward()
    opt.step()
from torch._dynamo.utils import counters
print(json.dumps({"graph_breaks": sum(counters["graph_break"].values()), "reasons": [r.split(chr(10))[0] for r in counters["graph_break"]],
                  "unique_graphs": counters["stats"]["unique_graphs"], "ca": dict(counters["compiled_autograd"])}))
