"""The compiled-optimizer recipe: the optimizer's step compiled on its own (`torch.compile` around
`opt.step()`, the learning rate a tensor so a change does not recompile), the model's forward and
backward plain. SGD with momentum makes its momentum buffers in its first step(), so Dynamo compiles
step() once more for the filled state, once. `python compiled_optimizer.py N`: N backward calls a
step (gradient accumulation; 1 by default); `python compiled_optimizer.py N clamp`: and every
parameter clamped in place under no_grad after each backward (weight clipping between micro-batches,
not an optimizer step). Prints the loss per step and torch's counters as its last line."""

import json
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.01), momentum=0.9)


@torch.compile(backend="eager")
def opt_step():
    opt.step()


accumulate = int(sys.argv[1]) if len(sys.argv) > 1 else 1
clamp = sys.argv[2:3] == ["clamp"]
for step in range(4):
    for _ in range(accumulate):
        loss = model(torch.randn(2, 4)).pow(2).mean()
        loss.backward()
        if clamp:
            with torch.no_grad():
                for p in model.parameters():
                    p.clamp_(-0.3, 0.3)
    opt_step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.6f}")
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
