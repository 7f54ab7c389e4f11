"""Activation checkpointing with torch.utils.checkpoint.checkpoint_sequential inside the compiled
forward (4 residual blocks in 2 segments, non-reentrant), or with `--loop`, what it does written as
a loop of checkpoint() calls over the same segments: torch marks checkpoint_sequential skipped for
Dynamo, which breaks at its call and runs its checkpoints eagerly; the loop traces."""

import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

torch.manual_seed(0)
LOOP = "--loop" in sys.argv


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*[Block() for _ in range(4)])
        self.head = torch.nn.Linear(32, 1)

    def forward(self, x):
        if LOOP:
            for segment in (self.blocks[:2], self.blocks[2:]):
                x = checkpoint(segment, x, use_reentrant=False)
        else:
            x = checkpoint_sequential(self.blocks, 2, x, use_reentrant=False)
        return self.head(x)


model = Net()
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    loss = F.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
