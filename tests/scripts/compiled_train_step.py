"""A training step compiled whole: forward, a GradScaler's backward, the scaler's step() and the
optimizer step inside one torch.compile'd function (as the compiled-optimizer recipe compiles
`opt.step()`). Prints torch's counters as its last line."""

import json

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu")


@torch.compile(backend="eager")
def train_step(x):
    opt.zero_grad()
    scaler.scale(model(x).mean()).backward()
    scaler.step(opt)
    scaler.update()


for _ in range(3):
    train_step(torch.randn(2, 4))
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
