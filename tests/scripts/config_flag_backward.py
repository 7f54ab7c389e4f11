"""A job that turns compiled autograd on alone, with the config flag, its backward inside a compiled
function whose batch size changes: compiled autograd captures while Dynamo's frame callback is
active. Prints torch's counters last (frames offered to Dynamo, captures, graphs)."""

import json

import torch
import torch.nn as nn

torch._dynamo.config.compiled_autograd = True
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@torch.compile(backend="eager")
def train_step(x, y):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step, bs in enumerate([16, 16, 16, 8, 16, 16, 8, 16]):
    x, y = torch.randn(bs, 16), torch.randn(bs, 1)
    opt.zero_grad()
    loss = train_step(x, y)
    opt.step()
counters = torch._dynamo.utils.counters
print(json.dumps({"frames": counters["frames"]["total"], "captures": counters["compiled_autograd"]["captures"],
                  "graphs": counters["stats"]["unique_graphs"]}))
