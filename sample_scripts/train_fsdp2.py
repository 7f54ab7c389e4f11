"""FSDP2 (`fully_shard`) over gloo, 2 ranks started with torch.multiprocessing.spawn (or by
torchrun, which sets RANK / WORLD_SIZE / MASTER_PORT itself), the model compiled with torch.compile.

Each Linear is sharded on its own and the whole model once more, as FSDP2 jobs wrap their blocks;
every parameter is then a DTensor of which each rank holds one shard, and the script returns from
`train()` (so the model and its optimizer are gone before the process ends, as in most scripts).
Each rank prints its loss per step and its torch counters as one JSON line, so a test can compare
them with the record.

    python train_fsdp2.py [--steps 6] [--world-size 2] [--backend aot_eager]
    torchrun --nproc-per-node 2 train_fsdp2.py [--steps 6]
"""

import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank: int, world_size: int, steps: int, backend: str, port: int | None) -> None:
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend=backend)
    generator = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=generator)
        loss = compiled(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    from torch._dynamo.utils import counters

    # One write per line: the ranks share stdout and must not interleave.
    sys.stdout.write(json.dumps({
        "rank": rank,
        "losses": losses,
        "counters": {k: {str(a): b for a, b in v.items()} for k, v in counters.items()},
    }) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--backend", default="aot_eager", help="torch.compile's backend for the model")
    args = parser.parse_args()
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.steps, args.backend, None)
        return
    mp.spawn(train, args=(args.world_size, args.steps, args.backend, free_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
