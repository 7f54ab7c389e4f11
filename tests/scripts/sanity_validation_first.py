"""Lightning's sanity check in plain torch: a compiled model's `validation_step` runs under no_grad
on two validation batches (16 rows, then the last, 14) before the first training step; training
follows on full batches of 16. The 14-row batch recompiles the forward before step 0, in an
evaluation (grad off), and training's first call recompiles it for grad mode at step 0."""

import torch
from torch import nn

torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def validation_step(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(nn.functional.cross_entropy(model(x), y))


with torch.no_grad():
    for rows in (16, 14):
        validation_step(torch.randn(rows, 8), torch.randint(0, 4, (rows,)))
for step in range(3):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 4, (16,))).backward()
    optimizer.step()
