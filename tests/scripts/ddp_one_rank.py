"""DDP in the main process itself (gloo, world size 1). With --remove-hooks it removes DDP's
all-reduce hooks after construction, so no collective can reach the compiled-autograd graph."""

import argparse
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--remove-hooks", action="store_true")
args = parser.parse_args()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
if args.remove_hooks:
    for handle in model._accum_grad_hooks:
        handle.remove()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
dist.barrier()
dist.destroy_process_group()
