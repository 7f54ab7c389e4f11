"""Two backward calls a step, on two graphs (`l1.backward(retain_graph=True); l2.backward()`, as a
GAN's discriminator and generator do): compiled autograd captures each once, at step 0."""

import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10):
    x, y = torch.randn(16, 16), torch.randn(16, 1)
    out = cmodel(x)
    l1 = nn.functional.mse_loss(out, y)
    l2 = out.abs().mean()
    opt.zero_grad(set_to_none=False)
    l1.backward(retain_graph=True)
    l2.backward()
    opt.step()
print("final", round(l1.item(), 4))
