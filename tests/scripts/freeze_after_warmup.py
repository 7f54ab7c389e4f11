"""Fine-tune every layer for 3 steps, then freeze the backbone and train only the head (the
opposite of sample_scripts/unfreeze_backbone.py). Dynamo guards each parameter's requires_grad:
the forward recompiles once (`expected requires_grad=1`), and compiled autograd captures the
backward of the new forward, which no longer accumulates the backbone's gradients."""

import torch
import torch.nn as nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
head = nn.Linear(32, 4)
model = torch.compile(nn.Sequential(backbone, head), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    if step == 3:
        for p in backbone.parameters():
            p.requires_grad = False
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
