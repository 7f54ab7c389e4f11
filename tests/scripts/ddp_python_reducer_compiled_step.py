"""DDP that chose the Python reducer itself (optimize_ddp = "python_reducer"), one rank over gloo,
with a compiled training step whose loss.backward() runs eagerly (a graph break): without compiled
autograd, Dynamo compiles DDP's all-reduce hook as the backward runs it, once per parameter shape."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

torch._dynamo.config.optimize_ddp = "python_reducer"
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.compile(backend="eager")
def train_step(x: torch.Tensor) -> torch.Tensor:
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    return loss


for _ in range(3):
    train_step(torch.randn(8, 16))
    optimizer.step()
dist.destroy_process_group()
