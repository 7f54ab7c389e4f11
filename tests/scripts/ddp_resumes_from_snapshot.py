"""pytorch/examples' DDP tutorial (distributed/ddp-tutorial-series/multigpu_torchrun.py) on gloo:
2 ranks by mp.spawn, 4 epochs of 2 steps, rank 0 saves snapshot.pt in the working directory after
epochs 0 and 2, and every rank resumes from it when it is there on start (so a second run starts
at epoch 3). Under cagtool every mode runs in that directory, as python would: the modes after the
first resume. Each rank's modes then differ from their first step, while the ranks of each mode
agree (DDP averages every gradient).

    python ddp_resumes_from_snapshot.py
"""

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


def train(rank: int, world_size: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    start = 0
    if os.path.exists("snapshot.pt"):
        snapshot = torch.load("snapshot.pt")
        model.load_state_dict(snapshot["model"])
        start = snapshot["epoch"] + 1
        print(f"rank {rank} resuming from epoch {start}")
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for epoch in range(start, 4):
        generator = torch.Generator().manual_seed(100 * epoch + rank)
        for _ in range(2):
            x, y = torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
        if rank == 0 and epoch % 2 == 0:
            torch.save({"model": model.state_dict(), "epoch": epoch}, "snapshot.pt")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2, free_port()), nprocs=2, join=True)
