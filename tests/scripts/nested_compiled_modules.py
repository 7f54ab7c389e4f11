"""Two torch.compile'd modules, one fed the other's output: `c2(c1(x))`. torch 2.13 runs every
compiled module's call through one wrapper frame (`inner`), so c2's first call recompiles c1's
frame; torch's first failing guard is `tensor 'args[0]' requires_grad mismatch. expected
requires_grad=0` (c1's input is a plain tensor, c2's is c1's output), the same line calling both
(TORCH_LOGS=recompiles on the plain run shows the one recompile)."""

import torch

torch.manual_seed(0)
m1 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
m2 = torch.nn.Linear(8, 1)
c1, c2 = torch.compile(m1, backend="eager"), torch.compile(m2, backend="eager")
opt = torch.optim.SGD([*m1.parameters(), *m2.parameters()], lr=0.01)
for step in range(4):
    loss = c2(c1(torch.randn(2, 4))).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", round(loss.item(), 4))
