"""Gradient accumulation under DDP as its docs show it: `model.no_sync()` around the micro-batches
whose gradients are not all-reduced, the step's last outside it, over a DistributedSampler whose
last batch per rank is smaller (165 rows a rank: 10 batches of 16, then 5); a compiled model
(aot_eager), 4 micro-batches a step, SGD, 2 epochs. Under compiled autograd, DDP's hooks (its Python
reducer) read `require_backward_grad_sync`, so each CA graph's code is compiled for False and for
True; on the last batch the entry made for True fails on the size. Run under torchrun (2 ranks)."""

import contextlib, os
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
ds = TensorDataset(torch.randn(330, 32, generator=g), torch.randn(330, 1, generator=g))
sampler = DistributedSampler(ds, shuffle=False)
loader = DataLoader(ds, batch_size=16, sampler=sampler)
compiled = torch.compile(model, backend="aot_eager")
ACC = 4
for epoch in range(2):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % ACC == 0 or i + 1 == len(loader)
        ctx = contextlib.nullcontext() if last else model.no_sync()
        with ctx:
            loss = nn.functional.mse_loss(compiled(x), y) / ACC
            loss.backward()
        if last:
            opt.step()
            opt.zero_grad()
    if rank == 0:
        print("epoch", epoch, loss.item(), flush=True)
dist.destroy_process_group()
