"""Compiled autograd enabled by hand around the loop, `_enable(torch.compile(...))` (as a Lightning
user wraps trainer.fit), over a compiled model: a DataLoader of 10 samples in batches of 4, so each
epoch ends with 2 rows; two epochs. The last batch recompiles the forward (4 -> 2) and compiled
autograd captures its backward anew; the next epoch's 4 rows recompile that capture's code in
Dynamo (`sizes[0]` 2 -> 4): one change of the batch, rooted in the forward's recompile."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)), backend="aot_eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(10, 8), torch.randn(10, 1)), batch_size=4)
with torch._dynamo.compiled_autograd._enable(torch.compile(backend="aot_eager")):
    for epoch in range(2):
        for x, y in data:
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
print("trained 2 epochs")
