"""A job that saves its model in the working directory at its end and never loads it (as
pytorch/examples' siamese network does with --save-model), seeded from os.urandom, so every run
draws other weights and inputs: a later mode finds the file an earlier one wrote, and its first loss
differs for a reason of its own. `--load-back`: then loads it back, as pytorch/examples' word
language model loads its best model at its end (a read of the mode's own file, not a resume)."""

import os
import sys

import torch

torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(torch.randn(16, 8)), torch.randn(16, 1)).backward()
    opt.step()
torch.save(model.state_dict(), "model.pt")
if "--load-back" in sys.argv[1:]:
    model.load_state_dict(torch.load("model.pt"))
