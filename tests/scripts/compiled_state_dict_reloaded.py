"""A job that trains its model compiled, saves its state_dict and loads it into a fresh model for
evaluation, as many training scripts end: the state_dict of what torch.compile returned names every
key `_orig_mod.<name>`, so load_state_dict into the plain model raises (missing and unexpected
keys), under python and in every mode of cagtool's (its eager mode keeps torch.compile's wrapper,
as python does, though Dynamo is off there).

    python compiled_state_dict_reloaded.py
"""

import torch
from torch import nn

torch.manual_seed(0)
model = torch.compile(nn.Linear(4, 1), backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
saved = model.state_dict()
fresh = nn.Linear(4, 1)
fresh.load_state_dict(saved)
