"""DDP around a compiled module, DDP(torch.compile(net)) (the order that compiles with DDP's C++
reducer), training and an evaluation under torch.set_grad_enabled(False) through one call, as
pytorch/examples' minGPT-ddp does: the evaluation recompiles on the grad mode. One process
(world size 1, gloo, a file store: no port to collide on). `--compile-outside`: torch.compile(DDP(net))
instead, whose `_orig_mod` is the DDP."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
model = torch.compile(DDP(net), backend="eager") if "--compile-outside" in sys.argv[1:] else DDP(torch.compile(net, backend="eager"))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def run_batch(x, y, train):
    with torch.set_grad_enabled(train):
        loss = torch.nn.functional.mse_loss(model(x), y)
    if train:
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


for epoch in range(2):
    for _ in range(4):
        run_batch(torch.randn(8, 8), torch.randn(8, 1), True)
    run_batch(torch.randn(8, 8), torch.randn(8, 1), False)
dist.destroy_process_group()
