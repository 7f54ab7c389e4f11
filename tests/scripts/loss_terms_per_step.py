"""Domain-adversarial training: on odd steps a domain loss through a gradient-reversal
autograd.Function joins the task loss (two backward graphs, each captured once); after the loop a
probe loss on a line of its own is backpropagated once: a graph no earlier backward had."""

import torch
import torch.nn as nn


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad


torch.manual_seed(0)
features = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
task, domain = nn.Linear(16, 1), nn.Linear(16, 1)
f = torch.compile(features, backend="aot_eager")
opt = torch.optim.SGD([*features.parameters(), *task.parameters(), *domain.parameters()], lr=0.01)
for step in range(4):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    h = f(x)
    loss = nn.functional.mse_loss(task(h), y)
    if step % 2 == 1:
        d = domain(GradReverse.apply(h))
        loss = loss + nn.functional.binary_cross_entropy_with_logits(d, torch.ones_like(d))
    opt.zero_grad()
    loss.backward()
    opt.step()
probe = torch.randn(4, 16, requires_grad=True)
domain(probe).pow(2).mean().backward()
print(f"loss {loss.item():.4f}")
