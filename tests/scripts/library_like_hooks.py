"""Hooks shaped as DeepSpeed's ZeRO hooks are, in a script of its own: a forward pre-hook that
reads a step counter it holds in its closure (DeepSpeed's throughput timer), and one
post-accumulate-grad hook per parameter, a 2-D weight and a 1-D bias, each holding its parameter
(DeepSpeed's gradient handling). Under compiled autograd the graph's call_hook meets tensors of
two ranks and two parameter objects; the forward frame is compiled again as the counter fills."""

import torch
from torch import nn

torch.manual_seed(0)


class Timer:
    def __init__(self) -> None:
        self.global_step_count = 0


def make_pre_hook(timer: Timer):
    def pre_hook(module, args):
        if timer.global_step_count == 0:
            return (args[0] * 1.0,)
        return None

    return pre_hook


def make_grad_hook(param: nn.Parameter, seen: list):
    def grad_handling_hook(p):
        seen.append(param.shape)

    return grad_handling_hook


timer, seen = Timer(), []
model = nn.Linear(8, 4)
model.register_forward_pre_hook(make_pre_hook(timer))
for p in model.parameters():
    p.register_post_accumulate_grad_hook(make_grad_hook(p, seen))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    loss = compiled(torch.randn(4, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    timer.global_step_count += 1
print("hooks ran", len(seen))
