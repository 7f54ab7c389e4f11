"""A Python int step passed to the compiled forward, which branches on it: a warm-up without the
last term, then with it. Dynamo recompiles the forward on the step's value (`step == 0`, then
`step <= 2`), and at step 3 the forward computes one more add: its backward has a new AddBackward0,
captured once. Passing the step as a tensor stops the recompiles but not the add."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x, step):
        h = torch.relu(self.fc1(x))
        if step < 3:  # warm-up
            return self.fc2(h)
        return self.fc2(h) + 0.01 * step


model = Net()
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(8):
    x, y = torch.randn(16, 16), torch.randn(16, 4)
    loss = nn.functional.mse_loss(cmodel(x, step), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", round(loss.item(), 4))
