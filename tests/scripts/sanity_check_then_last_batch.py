"""Lightning's fit() in plain torch: a compiled model, its loss computed eagerly, first evaluated
under no_grad on a validation DataLoader (30 rows by 16: 16, then 14; Lightning's sanity check),
which makes the forward's batch dimension dynamic, then trained for 2 epochs on a DataLoader of
100 rows by 16: each epoch ends with a batch of 4. The forward compiles no more for it; compiled
autograd captures the backward again at the first epoch's last step, where the compiled forward's
backward node holds its sizes in the cache key only (no node of the graph reads them)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train = DataLoader(TensorDataset(torch.randn(100, 32), torch.randint(0, 4, (100,))), batch_size=16, shuffle=True)
val = DataLoader(TensorDataset(torch.randn(30, 32), torch.randint(0, 4, (30,))), batch_size=16)


def validation_step(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(nn.functional.cross_entropy(model(x), y))


with torch.no_grad():
    for x, y in val:
        validation_step(x, y)
for epoch in range(2):
    for x, y in train:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
