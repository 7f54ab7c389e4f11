"""DDP over gloo with one rank per process, as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT from the environment): the shape of a multi-node job. With --diverge-rank R,
rank R runs one extra op in its forward at step 2 only, so its CA graphs part from the others'.

    torchrun --nnodes 2 --node-rank K --nproc-per-node 1 ... ddp_env_ranks.py [--steps 4] [--diverge-rank 1]
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--diverge-rank", type=int, default=-1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    for step in range(args.steps):
        net.extra_op = rank == args.diverge_rank and step == 2
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} of {dist.get_world_size()} (node {os.environ.get('GROUP_RANK')}) done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
