"""Hooks that join the backward part-way: a gradient clamp on the first layer's weight from step 2,
a post-accumulate-grad hook on the last layer's weight from step 3, a module full backward hook on
the last layer from step 4, and from step 5 a scaling hook registered on the first layer's bias at
every step and never removed (one more each step). Each is a new compiled-autograd graph."""

import torch
import torch.nn as nn


def clip_grad(grad):
    return grad.clamp(-0.5, 0.5)


def scale_grad(grad):
    return grad * 0.5


def decay_grad(param):
    param.grad.mul_(0.9)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8):
    if step == 2:
        model[0].weight.register_hook(clip_grad)
    if step == 3:
        model[2].weight.register_post_accumulate_grad_hook(decay_grad)
    if step == 4:
        model[2].register_full_backward_hook(lambda module, grad_in, grad_out: None)
    if step >= 5:
        model[0].bias.register_hook(scale_grad)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
