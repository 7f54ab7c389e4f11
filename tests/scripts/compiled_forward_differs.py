"""A seeded job whose compiled forward computes differently from its eager one (it scales a
weight when Dynamo traces it: what a forward miscompile looks like). Prints each step's loss."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        w = self.fc2.weight
        if torch.compiler.is_compiling():
            w = w * 1.05
        return nn.functional.linear(h, w, self.fc2.bias)


model = Net()
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(5):
    x, y = torch.randn(16, 16), torch.randn(16, 4)
    loss = nn.functional.mse_loss(cmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, repr(loss.item()))
