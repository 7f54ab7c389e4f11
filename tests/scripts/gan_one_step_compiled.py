"""A GAN whose critic's optimizer steps inside compiled code (`torch.compile(optD.step)`) and whose
generator's steps eagerly: two critic steps an iteration, one generator step. The critic's
parameters are digested only where a hook sees a step (eager's, G's in every mode)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
D = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
optG = torch.optim.SGD(G.parameters(), lr=1e-2)
optD = torch.optim.RMSprop(D.parameters(), lr=5e-4)
stepD = torch.compile(optD.step, backend="eager")
for it in range(4):
    for _ in range(2):
        z, real = torch.randn(16, 8), torch.randn(16, 4)
        optD.zero_grad()
        lossD = -(D(real).mean() - D(G(z).detach()).mean())
        lossD.backward()
        stepD()
    optG.zero_grad()
    lossG = -D(G(torch.randn(16, 8))).mean()
    lossG.backward()
    optG.step()
    print(f"iter {it} D {lossD.item():.6f} G {lossG.item():.6f}")
