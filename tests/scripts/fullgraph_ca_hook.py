"""Compiled autograd enabled the way TorchRec's pipeline does (`_enable(torch.compile(...,
fullgraph=True), dynamic=True)`), with a gradient hook that appends each step's gradient norm to a
Python list: Dynamo guards the list's length, so every backward recompiles the graph's code, and a
hook under torch._dynamo.disable would be an error in a full graph.

    python fullgraph_ca_hook.py
"""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), 0.01)
norms = []
model[0].weight.register_hook(lambda g: norms.append(g.norm().item()) or g)
with torch._dynamo.compiled_autograd._enable(torch.compile(backend="eager", fullgraph=True), dynamic=True):
    for step in range(4):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"final loss {loss.item():.4f}, {len(norms)} norms")
