"""Two DDP ranks over gloo (mp.spawn) that train until stopped: each prints `READY <rank>` after
three steps, for tests that stop the job with a signal as a CI runner would."""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = DDP(torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step == 3:
            sys.stdout.write(f"READY {rank}\n")
            sys.stdout.flush()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    mp.spawn(train, args=(free,), nprocs=2)
