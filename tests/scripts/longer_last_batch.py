"""A small sequence model trained at one length, whose last batch is longer (the data's longest
sequences come last): Dynamo recompiles the forward at the last step for the new length, and
compiles that length dynamic (automatic dynamic shapes): a later length would reuse it.

    python longer_last_batch.py
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 50))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
lengths = [8, 8, 8, 8, 8, 12]
for step, length in enumerate(lengths):
    ids = torch.randint(0, 50, (4, length))
    loss = F.cross_entropy(cmodel(ids).view(-1, 50), ids.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"final loss {loss.item():.4f}")
