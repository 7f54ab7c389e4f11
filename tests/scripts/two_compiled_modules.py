"""A GAN's two compiled modules: G (4 -> 8) and D (8 -> 1), each torch.compile'd. torch 2.13 runs
every compiled module's call through one wrapper frame, so D's first call recompiles G's frame (a
size guard on dim 1: 4 vs 8); D then sees its input detached (`fake.detach()`) and not (G's
output), a requires_grad guard on an input, not a parameter."""

import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
D = nn.Sequential(nn.Linear(8, 1))
cG, cD = torch.compile(G, backend="eager"), torch.compile(D, backend="eager")
oG, oD = torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)
for step in range(4):
    fake = cG(torch.randn(8, 4))
    lossD = cD(torch.randn(8, 8)).mean() - cD(fake.detach()).mean()
    oD.zero_grad()
    lossD.backward()
    oD.step()
    lossG = -cD(fake).mean()
    oG.zero_grad()
    lossG.backward()
    oG.step()
print("final", round(lossG.item(), 4))
