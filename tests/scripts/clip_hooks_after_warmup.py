"""Gradient clipping by hooks on the parameters, registered once warm-up ends (step 3), in a loop
over the parameters under an `if` of the training loop: one compiled-autograd recompile."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    if step == 3:
        for p in model.parameters():
            p.register_hook(lambda g: g.clamp(-0.1, 0.1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    loss = nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
