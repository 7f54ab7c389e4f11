"""A compiled torch.nn model and `opt.step = torch.compile(opt.step)` with an LR scheduler made
first. The scheduler replaces `opt.step` with its own counting wrapper, a plain function of
torch's (torch/optim/lr_scheduler.py), which torch.compile runs through the same wrapper frame as
every compiled torch.nn module (`inner`): the step's first call recompiles the model's frame on
`len(args) == 1` (the model got one argument, the step none), then SGD's momentum state once
(TORCH_LOGS=recompiles on the plain run shows these two)."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.01), momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100)
model = torch.compile(model, backend="eager")
opt.step = torch.compile(opt.step, backend="eager")
for step in range(4):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad()
print("final", round(loss.item(), 4))
