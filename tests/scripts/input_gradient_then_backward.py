"""An input-gradient penalty (a double backward): each step takes torch.autograd.grad of the output
with respect to the input with create_graph=True, adds the gradient's norm to the loss, and calls
backward. Two backward calls a step, two graphs, each captured once at step 0; they cannot be
summed into one backward (the first call's gradients feed the second's loss)."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    x = torch.randn(4, 8, requires_grad=True)
    y = model(x).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    loss = y + g.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", round(loss.item(), 4))
