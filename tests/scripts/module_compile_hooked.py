"""nn.Sequential with a forward pre-hook (as DeepSpeed's engine registers), compiled in place with
Module.compile(): Dynamo compiles Sequential.forward (torch 2.13's counters: unique_graphs 1), where
a Sequential without hooks compiles nothing. Prints torch's frames and graphs at exit."""
import atexit

import torch
from torch import nn
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
model.register_forward_pre_hook(lambda mod, args: None)
model.compile(backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
atexit.register(lambda: print("counters frames", dict(counters["frames"]), "stats", dict(counters["stats"]), flush=True))
for step in range(4):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
