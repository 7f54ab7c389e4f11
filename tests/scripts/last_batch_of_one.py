"""A DataLoader of 9 samples in batches of 4: the last batch of every epoch has one row, two
epochs. The forward is compiled with a graph break inside (two frames). Dynamo specialises a size
of 0 or 1 even in a dimension marked dynamic, so `--mark` (torch._dynamo.maybe_mark_dynamic on the
batch, the usual fix for a smaller last batch) still recompiles each frame at the batch of one, on
the guard `2 <= x.size()[0]`; only dropping that batch (`--drop-last`) leaves no recompile.
`--evaluate` evaluates under torch.no_grad() after each epoch: one evaluation recompiles both
frames on the grad mode. `--in-place`: the module compiled in place (`model.compile()`), not wrapped."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
mark, drop_last, evaluate = "--mark" in sys.argv, "--drop-last" in sys.argv, "--evaluate" in sys.argv
in_place = "--in-place" in sys.argv


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(6, 8), nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.first(x))
        torch._dynamo.graph_break()
        return self.second(h)


model = Net()
if in_place:
    model.compile(backend="aot_eager")
    compiled = model
else:
    compiled = torch.compile(model, backend="aot_eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(9, 6), torch.randn(9, 1)), batch_size=4, drop_last=drop_last)
for epoch in range(2):
    for x, y in data:
        if mark:
            torch._dynamo.maybe_mark_dynamic(x, 0)
            torch._dynamo.maybe_mark_dynamic(y, 0)
        loss = nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if evaluate:
        with torch.no_grad():
            print(f"epoch {epoch}: held-out {compiled(torch.ones(4, 6)).mean().item():.4f}")
print("trained 2 epochs")
