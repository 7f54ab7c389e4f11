"""Three modules whose forwards go through one decorator's wrapper (as transformers' `deprecate_kwarg`
wraps both LlamaForCausalLM's and LlamaModel's), the inner two breaking the graph: the wrapper is
then a compiled frame of its own for each module, one entry per class (Dynamo's type guard on
`args[0]`) and per number of positional arguments (`len(args)`: the last module is called by
keyword, so the wrapper's *args holds `self` alone). 28 rows in batches of 8 for 2 epochs (a last
batch of 4), under torch.compile (eager backend)."""

import functools

import torch
from torch import nn


def logged(forward):
    @functools.wraps(forward)
    def wrapped(*args, **kwargs):
        name = f"{args[0].__class__.__name__}.forward"  # reads the class: a type guard on args[0]
        assert name
        return forward(*args, **kwargs)

    return wrapped


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return torch.relu(self.lin(x))


class Gate(Inner):  # another class: another entry of the wrapper
    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return torch.sigmoid(self.lin(x)) * x


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner, self.gate, self.head = Inner(), Gate(), nn.Linear(8, 1)

    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(x=self.inner(x)))  # the gate by keyword


torch.manual_seed(0)
model = Outer()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(28, 8)
for epoch in range(2):
    for i in range(0, len(data), 8):
        opt.zero_grad()
        compiled(data[i:i + 8]).pow(2).mean().backward()
        opt.step()
