"""A whole training step compiled: forward, backward and the optimizer's step() in one
`torch.compile`d function (the backward a graph break, the step traced into the graph Dynamo resumes
with), so the step runs inside a compiled graph, where no optimizer hook runs. zero_grad() is the
loop's, after the call. `python compiled_whole_step.py N`: N steps (5 by default). Prints the loss
per step."""

import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.01), momentum=0.9)


@torch.compile(backend="eager")
def train_step(x):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss


for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    loss = train_step(torch.randn(2, 4))
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.6f}")
