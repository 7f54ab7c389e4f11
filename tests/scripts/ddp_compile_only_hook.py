"""DDP over gloo, 2 ranks by mp.spawn, a tensor hook on the weight that doubles its gradient only
when Dynamo traces it (`torch.compiler.is_compiling()`): under compiled autograd the hook is traced
into the CA graph, so the ca mode trains otherwise than eager on every rank, from its first
optimizer step (its losses part from step 1). What a multi-rank job whose ca mode's numerics
disagree looks like.

    python ddp_compile_only_hook.py [--steps 6]
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def doubled_when_compiled(grad: torch.Tensor) -> torch.Tensor:
    return grad * 2 if torch.compiler.is_compiling() else grad


def train(rank: int, world_size: int, steps: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    model.weight.register_hook(doubled_when_compiled)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x, y = torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    mp.spawn(train, args=(2, args.steps, free_port()), nprocs=2, join=True)
