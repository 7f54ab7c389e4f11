"""A script compiled with dynamic=True whose forward still recompiles on the batch size (torch 2.13):
its first batch has 16 rows, the Linear's in_features is 16, and duck sizing makes the batch the
parameter's static size (tests/test_torch_internals.py pins it). Prints torch's counters last."""

import json

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager", dynamic=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, rows in enumerate([16, 16, 12, 16, 9, 16]):
    x, y = torch.randn(rows, 16), torch.randn(rows, 1)
    loss = nn.functional.mse_loss(cmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
