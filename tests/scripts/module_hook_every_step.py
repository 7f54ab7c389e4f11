"""A module's full backward hook registered every step and removed after it: Dynamo guards the
module's hook dict, whose key (the handle's id) is new each step, so the forward recompiles every
step until the recompile limit."""

import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
seen = []
for step in range(10):
    h = model[2].register_full_backward_hook(lambda m, gi, go: seen.append(1))
    x, y = torch.randn(16, 16), torch.randn(16, 1)
    loss = nn.functional.mse_loss(cmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    h.remove()
print("final", round(loss.item(), 4), len(seen))
