"""A compiled optimizer step (torch.compile around `opt.step()`) under a warmup schedule that
writes each rate into the param groups as a Python number, as DeepSpeed's WarmupLR does: its
first rate is the minimum, written `0` (an int), the next `0.0` (a float), then rising floats.
torch guards the rate's type as well as its value, so step() recompiles twice: int 0 -> float 0.0,
then 0.0 -> the next rate, after which Dynamo takes the rate as an input. Prints torch's counters
last."""

import json
import math

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
min_lr, max_lr, warmup = 0, 0.01, 4


def set_rate(step: int) -> None:
    rate = min_lr if step < 0 else min_lr + (max_lr - min_lr) * math.log(step + 1) / math.log(warmup)
    for group in opt.param_groups:
        group["lr"] = rate


@torch.compile(backend="eager")
def opt_step():
    opt.step()


set_rate(-1)
for step in range(5):
    opt.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt_step()
    set_rate(step)
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
