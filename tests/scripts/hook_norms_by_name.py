"""A gradient-norm hook per parameter that writes into a dict keyed by the parameter's name (as
monitoring code does): under compiled autograd Dynamo compiles the hook, guards that the dict is
empty at its first compile, and recompiles it once when the dict fills; then the dict keeps its
size and every later backward reuses the compile."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
norms = {}


def norm_hook(name):
    def hook(g):
        norms[name] = g.norm()
        return g
    return hook


for name, p in model.named_parameters():
    p.register_hook(norm_hook(name))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
compiled = torch.compile(model, backend="eager")
for step in range(6):
    opt.zero_grad()
    compiled(torch.randn(4, 32)).pow(2).mean().backward()
    opt.step()
print(sorted(norms))
