"""A seeded job whose compiled program computes other gradients than its eager one, the same
forward values (what a library that behaves otherwise with Dynamo disabled looks like: cagtool's
eager mode runs with it disabled): the first step's losses agree, the later ones part. aot and ca
compile it alike. Prints each step's loss."""

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
            w = w + (w * 0.05 - (w * 0.05).detach())  # the same value, 1.05x the gradient
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
