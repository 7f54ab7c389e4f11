"""A plain training loop (no torch.compile of its own) whose blocks run under reentrant activation
checkpointing, with a smaller last batch (7 rows, not 8): under compiled autograd the backward is
captured again for the new sizes, and the code that graph runs (the checkpoint's backward through
torch's call_backward, and its recompute of the block) was compiled for 8 rows, so Dynamo
recompiles it in the same step."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return x + self.l2(torch.relu(self.l1(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)
        return self.head(x)


torch.manual_seed(0)
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(4):
    rows = 7 if step == 3 else 8
    x = torch.randn(rows, 16, requires_grad=True)
    loss = (net(x) - torch.randn(rows, 1)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
