"""A GAN whose optimizers zero with zero_grad(set_to_none=False): two backward calls a step (D's
loss, then G's), each its own compiled-autograd graph. At step 0 every .grad is None; from step 1
it is kept as a zeroed tensor, so each graph's AccumulateGrad is captured once more: torch counts 4
captures (TORCH_LOGS=compiled_autograd_verbose: GraphRoot, NegBackward0, then AccumulateGrad twice
at step 1; with the default zero_grad() it counts 2). Prints torch's counters as its last line."""

import json

import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
D = nn.Sequential(nn.Linear(8, 1))
oG, oD = torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)
for step in range(5):
    fake = G(torch.randn(8, 4))
    lossD = D(torch.randn(8, 8)).mean() - D(fake.detach()).mean()
    oD.zero_grad(set_to_none=False)
    lossD.backward()
    oD.step()
    lossG = -D(fake).mean()
    oG.zero_grad(set_to_none=False)
    lossG.backward()
    oG.step()
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items() if k == "compiled_autograd"}))
