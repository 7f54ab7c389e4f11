"""Prints to stdout and stderr each step, slowly enough for a live status to be drawn between."""

import sys
import time

import torch

model = torch.nn.Linear(4, 4)
for step in range(4):
    model(torch.randn(2, 4)).sum().backward()
    print(f"out {step}", flush=True)
    print(f"err {step}", file=sys.stderr, flush=True)
    time.sleep(0.3)
