"""A module whose forward branches on a bool attribute (`if self.use_bias:`), switched on at step 3
and off again at step 5: Dynamo compiles the frame once for each value (its guard tree holds
FALSE_MATCH, then TRUE_MATCH) and the flip back reuses the first graph."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 1)
        self.use_bias = False

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.use_bias:
            h = h + 1.0
        return self.b(h)


torch.manual_seed(0)
model = Net()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(7):
    model.use_bias = 3 <= step < 5
    loss = nn.functional.mse_loss(compiled(torch.randn(4, 8)), torch.randn(4, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
