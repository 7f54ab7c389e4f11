"""Tensor parallelism as pytorch/examples' distributed/tensor_parallelism does it, on the CPU: a
two-layer MLP, `parallelize_module` with the first layer column-wise and the second row-wise over a
1-D device mesh of every rank (gloo), AdamW, STEPS steps on inputs seeded alike on every rank. Its
parameters are DTensors (each rank a shard), as under FSDP2, but no FSDP2 runs: compiled autograd
runs this backward. Run it under torchrun (2 ranks). Each rank prints its last loss."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 4


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(32, 5)

    def forward(self, x):
        return self.out_proj(self.relu(self.in_proj(x)))


mesh = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
torch.manual_seed(0)
model = parallelize_module(ToyModel(), mesh, {"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()})
optimizer = torch.optim.AdamW(model.parameters(), lr=0.25, foreach=True)
for i in range(STEPS):
    torch.manual_seed(i)  # the same input on every rank
    loss = model(torch.rand(20, 10)).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {dist.get_rank()} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
