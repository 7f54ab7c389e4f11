"""Trains for N steps (argv[1], default 200) and prints DONE N: a job that must finish even when
cagtool cannot record it."""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
print(f"DONE {steps}", flush=True)
