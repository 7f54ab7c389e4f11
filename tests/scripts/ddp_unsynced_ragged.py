"""DDP over gloo, 2 ranks by mp.spawn, each rank on its own data: one job for two tests, the
gradient parity of a DDP job (test_grad_parity_run.py) and `recompiles --verify` on one
(test_verify_ddp.py).

- `fc2.bias` is left out of DDP's all-reduce (`_set_params_and_buffers_to_ignore_for_model`, what
  a model's own synchronisation code uses): that gradient stays each rank's own, the others are
  averaged. What gradient parity must report as an unsynchronised parameter across ranks, from
  step 0, in every mode, while each rank's modes agree with each other.
- The last batch is smaller (8 rows, then 4 on the last step: a DataLoader's ragged last batch):
  each rank's compiled autograd recompiles once for the changed sizes, what `recompiles --verify`
  measures on rank 0.

The script never sets optimize_ddp (cagtool's ca mode selects the Python reducer, which compiled
autograd needs).

    python ddp_unsynced_ragged.py [--steps 4]
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x).relu())


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
    DDP._set_params_and_buffers_to_ignore_for_model(net, ["fc2.bias"])
    model = DDP(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(rank)
    for step in range(steps):
        x = torch.randn(4 if step == steps - 1 else 8, 8, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    mp.spawn(train, args=(2, args.steps, free_port()), nprocs=2, join=True)


if __name__ == "__main__":
    main()
