"""A job that saves its model in the working directory at its end and never loads it (as
pytorch/examples' siamese network does with --save-model), seeded from os.urandom, so every run
draws other weights and inputs: a later mode finds the file an earlier one wrote, and its first loss
differs for a reason of its own."""

import os

import torch

torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(torch.randn(16, 8)), torch.randn(16, 1)).backward()
    opt.step()
torch.save(model.state_dict(), "model.pt")
