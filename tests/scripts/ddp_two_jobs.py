"""Two DDP jobs in one script, one after the other (pretraining, then fine-tuning), each 2 ranks
over gloo started by mp.spawn: every rank is started twice, with the same launcher attempt. The
first job trains 3 steps on batches of 8; the second 4 steps, its batches 6 rows from its step 2
(a new size: a recompile in each of its ranks). Each rank prints its job, rank and torch's
compiled-autograd captures as one JSON line.

    python ddp_two_jobs.py
"""

import json
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


def train(rank: int, job: str, steps: int, smaller_from: int | None, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        rows = 6 if smaller_from is not None and step >= smaller_from else 8
        loss = model(torch.randn(rows, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()
    from torch._dynamo.utils import counters

    sys.stdout.write(json.dumps({"job": job, "rank": rank, "ca_captures": counters["compiled_autograd"]["captures"]}) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=("pretrain", 3, None, free_port()), nprocs=2, join=True)
    mp.spawn(train, args=("finetune", 4, 2, free_port()), nprocs=2, join=True)
