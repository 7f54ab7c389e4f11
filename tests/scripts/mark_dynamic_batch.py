"""A batch size that changes, marked dynamic with torch._dynamo.mark_dynamic: runs under python;
under compiled autograd its first backward raises ConstraintViolationError (the CA graph's saved
copy of the input specializes the marked dimension; docs/torch-internals.md)."""

import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, bs in enumerate([16, 16, 12, 16, 9, 16, 7, 16, 5, 16]):
    x, y = torch.randn(bs, 16), torch.randn(bs, 1)
    torch._dynamo.mark_dynamic(x, 0)
    loss = nn.functional.mse_loss(cmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", round(loss.item(), 4))
