"""A mixture of experts: each of two slots runs the expert its router picks from the data (an
argmax read into Python), each expert a Linear and its own activation. The backward graph holds
the picked experts' nodes: other ops at the same places when the routing changes, and one
AccumulateGrad fewer where one expert serves both slots."""

import torch
import torch.nn as nn


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.acts = [torch.relu, torch.tanh, torch.sigmoid, nn.functional.gelu]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for _slot in range(2):
            idx = int(self.router(out).mean(0).argmax())
            out = self.acts[idx](self.experts[idx](out))
        return out.sum()


torch.manual_seed(0)
model = MoE()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    x = torch.randn(16, 8)
    opt.zero_grad()
    loss = model(x)
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
