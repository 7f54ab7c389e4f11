"""DDP over gloo, 2 ranks by torch.multiprocessing.spawn, whose last batch is smaller (8 rows,
then 4 on the last step: a DataLoader's ragged last batch): each rank's compiled autograd
recompiles once for the changed sizes; `recompiles --verify` measures rank 0, where ca-dynamic
removes it. Otherwise sample_scripts/train_ddp.py: the script never sets optimize_ddp (cagtool's
ca mode selects the Python reducer, which compiled autograd needs).

    python ddp_ragged_batch.py [--steps 4] [--world-size 2]
"""

import argparse
import json
import os
import sys
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank: int, world_size: int, steps: int, port: int | None) -> None:
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for step in range(steps):
        x = torch.randn(4 if step == steps - 1 else 8, 16, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # The ranks stay in sync only if the gradients were all-reduced.
    weights = model.module[0].weight.detach().clone()
    gathered = [torch.empty_like(weights) for _ in range(world_size)]
    dist.all_gather(gathered, weights)
    in_sync = all(torch.equal(gathered[0], g) for g in gathered)
    # The job's last collective, then the group goes (destroy_process_group, then the DDP model
    # with its Reducer as train() returns): the pattern torch 2.13's gloo can deadlock on, which
    # cagtool guards (docs/reliability.md, "A DDP job's end under gloo").
    dist.barrier()
    from torch._dynamo.utils import counters

    # One write per line: the ranks share stdout and must not interleave.
    sys.stdout.write(json.dumps({
        "rank": rank,
        "in_sync": in_sync,
        "ca_captures": counters["compiled_autograd"]["captures"],
        "optimize_ddp": str(torch._dynamo.config.optimize_ddp),
        "python_reducer": model._use_python_reducer,
    }) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.steps, None)
        return
    mp.spawn(train, args=(args.world_size, args.steps, free_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
