"""Two Python floats scheduled per step and passed to compiled code: a distillation temperature
only used in tensor arithmetic (Dynamo recompiles once, then takes it as an input), and a dropout
rate F.dropout needs as a constant (each new rate compiles again), in a model compiled with
fullgraph=True (a graph break there is an error: no fix may add one)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x, p):
        return self.fc2(F.dropout(F.relu(self.fc1(x)), p=p, training=self.training))


student = Net()
teacher = nn.Linear(8, 5)
compiled = torch.compile(student, backend="aot_eager", fullgraph=True)
opt = torch.optim.SGD(student.parameters(), lr=0.05)


@torch.compile(backend="aot_eager")
def distill(logits, x, temperature):
    with torch.no_grad():
        target = F.softmax(teacher(x) / temperature, dim=-1)
    return F.kl_div(F.log_softmax(logits / temperature, dim=-1), target, reduction="batchmean") * temperature**2


for step in range(6):
    p = min(0.05 * step, 0.15)
    temperature = 4.0 - 0.5 * step
    x = torch.randn(16, 8)
    loss = distill(compiled(x, p), x, temperature)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
