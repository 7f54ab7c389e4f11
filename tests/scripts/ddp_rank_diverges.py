"""DDP over gloo, 2 ranks by mp.spawn, where rank 1 runs one extra op in its forward at step 2 only:
its backward graph then has an extra autograd node (TanhBackward0) that rank 0's never has, so
compiled autograd misses its cache on rank 1 alone. What `cagtool summary` must report as ranks
whose CA graphs part at step 2 (steps numbered from 0, as this loop and cagtool number them).
(Scaling the loss on rank 1 on every step would not do: the difference would be there from
step 0, not where the ranks part mid-run.)

    python ddp_rank_diverges.py [--steps 5]
"""

import argparse
import json
import sys
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

DIVERGING_RANK = 1
DIVERGING_STEP = 2


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)
        self.extra_op = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x).relu()
        if self.extra_op:
            h = torch.tanh(h)
        return self.fc2(h)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank: int, world_size: int, steps: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = Net()
    model = DDP(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(rank)
    for step in range(steps):
        net.extra_op = rank == DIVERGING_RANK and step == DIVERGING_STEP
        loss = model(torch.randn(4, 8, generator=generator)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    from torch._dynamo.utils import counters

    sys.stdout.write(json.dumps({"rank": rank, "ca_captures": counters["compiled_autograd"]["captures"]}) + "\n")  # one write: ranks share the pipe, and print writes the newline apart
    sys.stdout.flush()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    mp.spawn(train, args=(2, args.steps, free_port()), nprocs=2, join=True)


if __name__ == "__main__":
    main()
