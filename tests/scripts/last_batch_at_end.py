"""One epoch over 20 rows in batches of 8: the job's last step is its one short batch (4 rows), where
compiled autograd captures a graph anew. The ca mode digests that step's gradients in its
optimizer's pre-hook (a recompile step); eager, which compiled nothing there, digests them at the
run's end, from the gradients still held (the script zeroes them before each backward)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for x, y in DataLoader(TensorDataset(torch.randn(20, 8), torch.randn(20, 1)), batch_size=8):
    opt.zero_grad()
    nn.functional.mse_loss(compiled(x), y).backward()
    opt.step()
