"""A tiny language model trained for a few steps, then sampled under torch.no_grad() from a
prompt of one token: each generated token makes the input one longer (1, 2, 3, ...). Dynamo
recompiles the forward for the grad mode, then once for the length going from 1 to 2 (the first
length, 1, was compiled as a constant: a size of 0 or 1 is always specialised) and compiles that
length dynamic: later lengths reuse it.

    python generate_from_one.py
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 50))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    ids = torch.randint(0, 50, (4, 12))
    loss = F.cross_entropy(cmodel(ids).view(-1, 50), ids.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
with torch.no_grad():
    idx = torch.zeros(1, 1, dtype=torch.long)
    for _ in range(6):
        nxt = cmodel(idx)[:, -1].argmax(-1, keepdim=True)
        idx = torch.cat([idx, nxt], 1)
print(idx.tolist())
