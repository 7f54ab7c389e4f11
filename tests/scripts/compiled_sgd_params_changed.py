"""Plain SGD (no momentum: it keeps no state, so only its parameters show a step), its step() compiled
(`opt.step = torch.compile(opt.step)`), two backward calls a step, and the parameters changed in
place by something else than the optimizer inside compiled code between the micro-batches:
`python compiled_sgd_params_changed.py max_norm`: an `nn.Embedding(max_norm=1.0)`, the model's last
parameter, renormalised in place by every forward of the compiled model;
`python compiled_sgd_params_changed.py clamp`: every parameter clamped in a compiled function after
each backward (weight clipping);
`python compiled_sgd_params_changed.py clamp_in_step`: one compiled function clamps every parameter
after each backward and steps the optimizer after a step's last one (opt.step() not compiled on its
own). Prints the loss per step, the steps it took, and torch's counters as its last line."""

import json
import sys

import torch

torch.manual_seed(0)
kind = sys.argv[1] if len(sys.argv) > 1 else "max_norm"


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(8, 1)
        self.emb = torch.nn.Embedding(20, 8, max_norm=1.0 if kind == "max_norm" else None)  # registered last

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids).mean(1))


model = Net()
compiled_model = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.5)
if kind != "clamp_in_step":
    opt.step = torch.compile(opt.step, backend="eager")


@torch.compile(backend="eager")
def clip() -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-0.3, 0.3)


@torch.compile(backend="eager")
def clip_then_step(step_now: bool) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-0.3, 0.3)
    if step_now:
        opt.step()


steps = 0
for step in range(4):
    for micro in range(2):
        loss = compiled_model(torch.randint(0, 20, (4, 3))).pow(2).mean() / 2
        loss.backward()
        if kind == "clamp":
            clip()
        elif kind == "clamp_in_step":
            clip_then_step(micro == 1)
    if kind != "clamp_in_step":
        opt.step()
    opt.zero_grad()
    steps += 1
    print(f"step {step} loss {loss.item():.6f}")
print("steps", steps)
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
