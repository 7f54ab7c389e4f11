"""A compiled optimizer step (pytorch/tutorials' compiling_optimizer_lr_scheduler: `opt.step()`
inside a torch.compile'd function), and a new optimizer made for a second phase: the first is
freed, and Dynamo drops the code compiled for it ("Cache line invalidated because ... got
deallocated"), then compiles once for the new one."""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.Adam(model.parameters(), lr=0.01)


@torch.compile(backend="eager")
def optimizer_step():
    opt.step()


for step in range(6):
    if step == 3:
        opt = torch.optim.Adam(model.parameters(), lr=0.005)  # the second phase's optimizer
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer_step()
    opt.zero_grad()
print("trained 6 steps")
