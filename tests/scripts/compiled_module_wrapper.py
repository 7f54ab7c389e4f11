"""A script that relies on what torch.compile(module) returns: it loads a checkpoint a compiled run
saved (its keys start with `_orig_mod.`), reads the module back through `_orig_mod` to save it, and
checks the wrapper's type. Under python every line holds; a mode that returned the module itself
from torch.compile would fail here (no `_orig_mod`, unexpected keys)."""

import sys

import torch
from torch._dynamo.eval_frame import OptimizedModule

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
saved_by_a_compiled_run = {"_orig_mod." + k: v.clone() for k, v in model.state_dict().items()}
compiled = torch.compile(model, backend="eager")
compiled.load_state_dict(saved_by_a_compiled_run)
opt = torch.optim.SGD(compiled.parameters(), lr=0.1)
x = torch.randn(16, 4)
for _ in range(3):
    opt.zero_grad()
    compiled(x).square().mean().backward()
    opt.step()
kept = compiled._orig_mod.state_dict()
print("wrapper:", isinstance(compiled, OptimizedModule), compiled._orig_mod is model,
      "keys:", ",".join(sorted(compiled.state_dict())), "kept:", ",".join(sorted(kept)))
off = torch.compile(model, disable=True)  # the script's own no-op: the module itself, in every mode
print("disable=True returns the module:", off is model)
sys.exit(0)
