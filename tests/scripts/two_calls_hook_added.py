"""Two backward calls a step, each its own graph: the second call's loss has a tensor hook every
step; the first call's gets one from step 2 on. The first call's recompile at step 2 is a hook
added to its own graph (!0), not a change from the graph captured just before it (!1, the other
call's, which has a hook of the same kind)."""

import torch
from torch import nn

torch.manual_seed(0)
first, second = nn.Linear(4, 4), nn.Linear(4, 4)
opt = torch.optim.SGD([*first.parameters(), *second.parameters()], lr=0.01)
x = torch.randn(8, 4)
for step in range(4):
    opt.zero_grad()
    h = first(x)
    if step >= 2:
        h.register_hook(lambda g: g * 0.5)
    h.sum().backward()  # the first call
    z = second(x)
    z.register_hook(lambda g: g * 2.0)
    z.sum().backward()  # the second call
    opt.step()
print("trained 4 steps")
