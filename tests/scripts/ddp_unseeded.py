# A torchrun DDP job that never seeds: each rank draws its own weights (DDP broadcasts rank 0's)
# and its own random inputs every step. Run with `torchrun --nproc-per-node 2 ddp_unseeded.py`.
# Each rank prints one JSON line: its first draw from random, numpy and torch, its final
# parameter norm, and what a test of followed DDP ranks compares with the record (its
# compiled-autograd captures, whether DDP used the Python reducer, whether the ranks' weights
# stayed in sync).
import json
import random
import sys

import numpy
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
draws = {"random": random.random(), "numpy": float(numpy.random.rand()), "torch": float(torch.rand(()))}
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(4):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
norm = float(sum(p.detach().double().norm() ** 2 for p in model.parameters()) ** 0.5)
# The ranks stay in sync only if the gradients were all-reduced.
weights = model.module[0].weight.detach().clone()
gathered = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, weights)
in_sync = all(torch.equal(gathered[0], g) for g in gathered)
from torch._dynamo.utils import counters

sys.stdout.write(json.dumps({"rank": rank, "draws": draws, "norm": norm, "in_sync": in_sync,
                             "ca_captures": counters["compiled_autograd"]["captures"],
                             "python_reducer": model._use_python_reducer}) + "\n")
sys.stdout.flush()
dist.barrier()
dist.destroy_process_group()
