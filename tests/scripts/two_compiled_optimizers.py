"""Two optimizers, each stepped in its own compiled function (`torch.compile` around `opt.step()`),
SGD with momentum and a tensor learning rate. torch.optim's step code is one code object for every
optimizer (its step wrapper) or every optimizer of a class (SGD.step), so the second optimizer's
first step() recompiles those frames on the optimizer's identity (`___check_obj_id(self, ...)`),
and each optimizer's filled momentum state recompiles SGD.step once more: 5 Dynamo recompiles
(TORCH_LOGS=recompiles on the plain run shows the same 5)."""

import torch

torch.manual_seed(0)
a, b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
oa = torch.optim.SGD(a.parameters(), lr=torch.tensor(0.01), momentum=0.9)
ob = torch.optim.SGD(b.parameters(), lr=torch.tensor(0.01), momentum=0.9)


@torch.compile(backend="eager")
def step_a():
    oa.step()


@torch.compile(backend="eager")
def step_b():
    ob.step()


for step in range(4):
    loss = b(torch.tanh(a(torch.randn(2, 4)))).pow(2).mean()
    loss.backward()
    step_a()
    step_b()
    oa.zero_grad()
    ob.zero_grad()
print("final", round(loss.item(), 4))
