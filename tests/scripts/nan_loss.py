"""Seeded training whose loss turns NaN at step 2 in every mode (multiplied by NaN: the gradients
and the parameters follow): the modes agree, and the NaN is what must be said.

    nan_loss.py [--from-step 2]
"""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--from-step", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    x = torch.randn(4, 8)
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    if step >= args.from_step:
        loss = loss * float("nan")
    loss.backward()
    opt.step()
