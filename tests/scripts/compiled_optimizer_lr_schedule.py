"""A compiled optimizer step (torch.compile around `opt.step()`) with an LR scheduler that changes
the rate every step: a float rate recompiles step() once (a tensor rate would not:
tests/test_torch_internals.py). Prints torch's counters last."""

import json

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9**s)


@torch.compile(backend="eager")
def opt_step():
    opt.step()


for step in range(5):
    opt.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt_step()
    sched.step()
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
