"""Trains 3 steps and leaves a file at MARKER (outside the working directory, as a dataset cache in
~/.torch is); a later run that finds it fails before its first step, as a job whose cache an earlier
mode wrote in another format does. `python fails_after_first_mode.py MARKER`."""

import os
import sys

import torch

marker = sys.argv[1]
if os.path.exists(marker):
    # with terminal escapes, as torch's own messages have them ("\x1b[1mdo those steps only if ...")
    raise RuntimeError(f"cannot read the cache {marker}: \x1b[1monly if you trust it\x1b[0m")
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
with open(marker, "w") as handle:
    handle.write("cache\n")
