"""A loop that zeroes the gradients before each backward and once more after the last step, in
place (`zero_grad(set_to_none=False)`): the gradients the run ends with are zeros, not those the
last step trained on. Prints each step's loss and gradient norm."""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(6, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    opt.zero_grad()
    loss = model(torch.randn(5, 6)).pow(2).mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.5f} gradnorm {model.weight.grad.norm().item():.5f}")
opt.zero_grad(set_to_none=False)
