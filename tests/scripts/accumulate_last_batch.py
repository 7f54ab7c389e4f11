"""Gradient accumulation as accelerate's `accumulate` does it, over a DataLoader whose last batch is
smaller: a compiled MLP, 4 micro-batches a step, .grad cleared to None after every optimizer step
(and at an epoch's end), 2 epochs of 21 batches (20 of 16 rows, then 10). The forward recompiles
for the 10 rows (the dimension then dynamic); the next epoch's first micro-batch (16 rows, .grad
None) makes compiled autograd capture the backward for the new sizes, and the step's second
micro-batch, adding into .grad, captures that graph's .grad warm-up."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
loader = DataLoader(TensorDataset(torch.randn(330, 32, generator=g), torch.randn(330, 1, generator=g)), batch_size=16)
compiled = torch.compile(model, backend="aot_eager")
ACCUMULATE = 4
for epoch in range(2):
    for index, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(compiled(x), y) / ACCUMULATE
        loss.backward()
        if (index + 1) % ACCUMULATE == 0 or index + 1 == len(loader):
            opt.step()
            opt.zero_grad()
    print("epoch", epoch, round(loss.item(), 6))
