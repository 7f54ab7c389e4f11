"""A seeded job trained under CPU bfloat16 autocast, its forward compiled (`--backend`, default
inductor): float32 parameters, every matmul and its gradient computed in bfloat16. The compiled
program rounds otherwise than eager (Inductor keeps a fusion's intermediates in float32), so the
gradients differ from eager's by bfloat16's rounding, not float32's. `--wrong` makes the compiled
program's fc2.weight gradient 1.02x eager's (the same forward values): what a real difference
looks like beside that rounding. Prints each step's loss.

    python autocast_bf16.py [--steps 4] [--backend inductor] [--wrong]
"""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--backend", default="inductor")
parser.add_argument("--wrong", action="store_true")
args = parser.parse_args()
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.ln = nn.LayerNorm(256)
        self.fc2 = nn.Linear(256, 64)

    def forward(self, x):
        h = nn.functional.gelu(self.ln(self.fc1(x)))
        w = self.fc2.weight
        if args.wrong and torch.compiler.is_compiling():
            w = w + (w * 0.02 - (w * 0.02).detach())  # the same value, 1.02x the gradient
        return nn.functional.linear(h, w, self.fc2.bias)


model = Net()
cmodel = torch.compile(model, backend=args.backend)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(args.steps):
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = cmodel(x)
    loss = nn.functional.mse_loss(out.float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, repr(loss.item()))
