"""A forward split into three frames by two graph breaks (a library's logging call does that in
an HF model), fed a DataLoader whose last batch is smaller (10 rows in batches of 4): one
changed batch recompiles each frame."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        h = torch.relu(self.b(h))
        torch._dynamo.graph_break()
        return self.c(h)


model = Net()
compiled = torch.compile(model, dynamic=False, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(10, 8), torch.randn(10, 1))
for x, y in torch.utils.data.DataLoader(data, batch_size=4):
    loss = nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
