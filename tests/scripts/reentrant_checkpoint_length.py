"""A compiled block under reentrant activation checkpointing whose sequence grows from 8 to 12 at
step 4. The checkpoint runs the block under no_grad in the forward and again with grad on in its
recompute in the backward: two cache entries of one frame. At step 4 torch's recompile reasons
list the recompute's entry first (it fails on the grad mode) and the forward's own entry second
(it fails on the size): the call's cause is the size."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, width)

    @torch.compile(backend="eager")
    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)))


torch.manual_seed(0)
block, head = Block(), nn.Linear(16, 1)
opt = torch.optim.SGD([*block.parameters(), *head.parameters()], lr=0.01)
for step in range(6):
    x = torch.randn(2, 8 if step < 4 else 12, 16, requires_grad=True)
    loss = head(checkpoint(block, x, use_reentrant=True)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained 6 steps")
