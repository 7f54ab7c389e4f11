"""A training step that also takes each sample's gradient norm by torch.func (`vmap(grad(...))`, as
a DP-SGD job clips them): two top-level backward calls a step, the per-sample one inside functorch's
grad transform, which torch runs under `compiled_autograd._disable()`, so compiled autograd captures
only the training backward. Prints the loss and the mean per-sample norm per step."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def loss_one(params, x, y):
    return F.cross_entropy(functional_call(model, params, (x.unsqueeze(0),)), y.unsqueeze(0))


for step in range(4):
    x, y = torch.randn(8, 10), torch.randint(0, 2, (8,))
    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))({k: v.detach() for k, v in model.named_parameters()}, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()]).norm(dim=0)
    loss = F.cross_entropy(cmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 4), round(norms.mean().item(), 4))
