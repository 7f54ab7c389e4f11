"""An encoder whose forward takes an optional attention mask, given in two of every three steps
and None in the third (its code takes another path without it), and whose Dropout's p is raised
once, at step 4. Dynamo compiles one graph for each form of the call (the mask None, the mask a
tensor), then recompiles each form once for the new p: the entry made for the other form fails on
the mask, the entry of the call's own form on p.

    python optional_mask.py
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc = nn.Linear(16, 2)
        self.drop = nn.Dropout(0.1)

    def forward(self, ids, attention_mask=None):
        h = self.drop(self.emb(ids))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.fc(h.mean(1))


torch.manual_seed(0)
model = Encoder()
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    ids = torch.randint(0, 50, (4, 10))
    mask = torch.ones(4, 10) if step % 3 else None
    if step == 4:
        model.drop.p = 0.2
    loss = F.cross_entropy(cmodel(ids, attention_mask=mask), torch.randint(0, 2, (4,)))
    loss.backward()
    opt.step()
    opt.zero_grad()
