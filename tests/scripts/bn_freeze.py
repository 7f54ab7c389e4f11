"""A fine-tuning that freezes its BatchNorm's running statistics from step 3 on (`model[1].eval()`)
and keeps training through it. Dynamo recompiles the forward on the BatchNorm's `training` flag,
and compiled autograd captures the eval-mode forward's backward: the switch is training's, not an
evaluation's.

    python bn_freeze.py
"""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    if step == 3:
        model[1].eval()
    loss = cmodel(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
