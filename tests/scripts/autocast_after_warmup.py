"""Mixed precision switched on after 3 full-precision warm-up steps (CPU autocast, bfloat16):
Dynamo recompiles the forward once (`GLOBAL_STATE changed: autocast(cpu)_enabled`), and the
backward of the new forward is a new graph to compiled autograd."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step >= 3):
        out = compiled(x)
    loss = nn.functional.mse_loss(out.float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
