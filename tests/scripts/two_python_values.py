"""Two Python values passed into a compiled forward: a dropout rate that changes every 3 steps, and
the step number the forward branches on (`if step % 2 == 0`). Dynamo recompiles for each: two
causes, each named by its own value."""

import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 32); self.l2 = nn.Linear(32, 1)
    def forward(self, x, p, step):
        h = F.dropout(torch.relu(self.l1(x)), p=p, training=self.training)
        if step % 2 == 0:
            h = h * 2
        return self.l2(h)
model = M()
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(12):
    p = 0.1 * (step // 3)          # dropout schedule: 0.0, 0.1, 0.2, 0.3
    x, y = torch.randn(16, 16), torch.randn(16, 1)
    loss = F.mse_loss(cmodel(x, p, step), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", round(loss.item(), 4))
