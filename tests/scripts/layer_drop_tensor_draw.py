"""LayerDrop: each training step skips each residual-free block with probability p, drawn with
torch.rand(()) and compared in Python: a data-dependent branch Dynamo does not compile (a graph
break), and each set of blocks that ran is another backward graph to compiled autograd.

    python layer_drop_tensor_draw.py
"""


import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, p: float = 0.3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))
        self.head = nn.Linear(16, 1)
        self.p = p

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(()) < self.p:
                continue
            x = torch.relu(block(x))
        return self.head(x)


torch.manual_seed(0)
model = Net()
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(12):
    loss = cmodel(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"final loss {loss.item():.4f}")
