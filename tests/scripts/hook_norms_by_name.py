"""A gradient-norm hook per parameter, made by a factory (as monitoring code does), that writes
into a dict keyed by the parameter's name (`--into dict`, the default) or appends to a list
(`--into list`). Under compiled autograd Dynamo compiles the hook: with the dict it guards that
the dict is empty at its first compile and recompiles once when it fills, then the dict keeps its
size and every later backward reuses the compile; the list is longer at every backward."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--into", choices=("dict", "list"), default="dict")
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
norms = {}
history = []


def norm_hook(name):
    def hook(g):
        if args.into == "dict":
            norms[name] = g.norm()
        else:
            history.append(g.norm())
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
print(sorted(norms), len(history))
