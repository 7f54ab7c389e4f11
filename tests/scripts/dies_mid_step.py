"""Gradient accumulation (2 backward calls per optimizer step) that ends in the middle of its third
step, after that step's two backward calls and before its optimizer step: `python dies_mid_step.py
HOW` with HOW `sigkill` (gone at once, as the OOM killer leaves it), `pause_sigkill` (the same
after a second without a step: longer than cagtool holds a line in memory) or `sigterm` (a CI
runner's stop at its default action)."""

import os
import signal
import sys
import time

import torch

how = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    opt.zero_grad()
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
    if step == 2:
        print("DYING", flush=True)
        if how == "pause_sigkill":
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL if how.endswith("sigkill") else signal.SIGTERM)
        signal.pause()
    opt.step()
