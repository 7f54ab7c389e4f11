"""Two DDP ranks (or `--world-size N`) over gloo (mp.spawn) that run `--steps` steps but, after `--wait-at` of them,
print `READY <rank>` and wait for a file that never comes: a job caught mid-training by a test's
signal, at a known step, without racing the clock.

    ddp_waits_at_step.py [--steps 10] [--wait-at 3] [--launcher spawn|env] [--world-size 2]
"""

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, port: int, steps: int, wait_at: int, world_size: int = 2) -> None:
    if port:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        if step == wait_at:
            sys.stdout.write(f"READY {rank}\n")
            sys.stdout.flush()
            while True:  # until a signal stops the job
                time.sleep(0.05)
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--wait-at", type=int, default=3)
    parser.add_argument("--launcher", choices=["spawn", "env"], default="spawn")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    if args.launcher == "env":  # torchrun started this process as one rank
        train(int(os.environ["RANK"]), 0, args.steps, args.wait_at)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            free = s.getsockname()[1]
        mp.spawn(train, args=(free, args.steps, args.wait_at, args.world_size), nprocs=args.world_size)
