"""torch.compile(DDP(module)), as torch's DDP documentation writes it, 2 ranks over gloo on CPU
(mp.spawn). On DDP's C++ reducer torch 2.13-2.15's Dynamo breaks the graph at DDP's
`_inside_ddp_forward` and compiles no graph: the module runs eagerly. `--inside` wraps the compiled
module instead, DDP(torch.compile(module)), which compiles its forward."""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank: int, port: int, inside: bool) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    model = DDP(torch.compile(net, backend="eager")) if inside else torch.compile(DDP(net), backend="eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(3):
        loss = model(torch.randn(8, 16, generator=generator)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(free_port(), "--inside" in sys.argv), nprocs=2, join=True)
