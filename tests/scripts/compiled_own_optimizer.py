"""An optimizer of the script's own: a momentum SGD subclassing torch.optim.Optimizer with its own
step() (no torch.optim step code, so no frame of torch.optim's is compiled), called inside a
function compiled with torch.compile, three backward calls a step (gradient accumulation). The
model's forward is compiled too. Prints the loss per step and torch's counters as its last line."""

import json

import torch

torch.manual_seed(0)


class MomentumSGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.05, momentum=0.9):
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = torch.zeros_like(p)
                state["buf"].mul_(group["momentum"]).add_(p.grad)
                p.add_(state["buf"], alpha=-group["lr"])


model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
compiled_model = torch.compile(model, backend="eager")
opt = MomentumSGD(model.parameters())


@torch.compile(backend="eager")
def opt_step():
    opt.step()


for step in range(4):
    for _ in range(3):
        loss = compiled_model(torch.randn(2, 4)).pow(2).mean() / 3
        loss.backward()
    opt_step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.6f}")
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
