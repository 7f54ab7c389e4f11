"""A GAN whose generator and critic are both torch.compile'd and alike in architecture
(Linear, ReLU, Linear) but not in width: G maps 8 features to 4, D takes 4. torch 2.13 runs every
compiled module's call through one wrapper frame (`inner`), so G's first call recompiles D's
frame, and torch's first failing guard is the input's size (`expected 4, actual 8`): another
module's first call, not a shape that changes."""

import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
D = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
cG, cD = torch.compile(G, backend="eager"), torch.compile(D, backend="eager")
optG, optD = torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)
for step in range(4):
    real, z = torch.randn(8, 4), torch.randn(8, 8)
    optD.zero_grad()
    lossD = cD(real).mean() - cD(cG(z).detach()).mean()
    lossD.backward()
    optD.step()
    optG.zero_grad()
    lossG = -cD(cG(z)).mean()
    lossG.backward()
    optG.step()
print("final", round(lossG.item(), 4))
