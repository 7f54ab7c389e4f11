"""A model that counts its own calls in a Python int attribute and branches on it (`self.calls % 5`),
compiled: Dynamo specialises an int attribute of an nn.Module on each value, so every call
recompiles until the recompile limit sends the forward to eager.

    python call_counter.py
"""

import torch, torch.nn as nn
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        out = self.body(x)
        if self.calls % 5 == 0:
            out = out * 1.0
        return out
model = Net()
cm = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), 0.01)
for step in range(12):
    loss = cm(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print(f"done: {model.calls} calls")
