"""Optimizer in backward (pytorch/tutorials' optimizer_step_in_backward_tutorial, torchtune's
optimizer_in_bwd): one optimizer per parameter, stepped by a post-accumulate-grad hook as each
gradient is ready; no optimizer.step() in the loop. `--lookup attr` (the default) finds a
parameter's optimizer as an attribute of it; `--lookup dict` in a dict keyed by the parameter, as
the tutorial does (under compiled autograd, torch 2.13 then steps one optimizer only:
docs/torch-internals.md). Prints the parameters' version counters at the end."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lookup", choices=("attr", "dict"), default="attr")
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizers = {p: torch.optim.SGD([p], lr=0.01) for p in model.parameters()}


def step_by_attr(p):
    p.optimizer.step()
    p.optimizer.zero_grad()


def step_by_dict(p):
    optimizers[p].step()
    optimizers[p].zero_grad()


for p in model.parameters():
    p.optimizer = optimizers[p]
    p.register_post_accumulate_grad_hook(step_by_attr if args.lookup == "attr" else step_by_dict)

compiled = torch.compile(model, backend="aot_eager")
for step in range(args.steps):
    loss = compiled(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
print("versions", [p._version for p in model.parameters()])
