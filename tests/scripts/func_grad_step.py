"""A training loop by torch.func: `grad` of a `functional_call`, the parameters updated by hand (no
.backward(), no optimizer). Its backward runs inside functorch's grad transform, where compiled
autograd captures nothing, even inside `compiled_autograd._enable` by hand. Prints the loss per step
and torch's compiled-autograd captures as its last line."""

import json

import torch
from torch import nn
from torch.func import functional_call, grad

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
params = {k: v.detach().clone() for k, v in model.named_parameters()}


def loss_fn(p, x, y):
    return nn.functional.mse_loss(functional_call(model, p, (x,)), y)


for step in range(3):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    g = grad(loss_fn)(params, x, y)
    params = {k: v - 0.1 * g[k] for k, v in params.items()}
    print(f"step {step} loss {loss_fn(params, x, y).item():.6f}")
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({"captures": counters["compiled_autograd"]["captures"]}))
