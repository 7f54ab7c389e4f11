"""pytorch/examples' mnist_forward_forward, its shape: a compiled forward trained full-batch (one
DataLoader batch of 12 rows), then a prediction on a test set of 5 rows, with grad on and no
backward after it. Its recompile is the prediction's, after training, not a training loader's
last batch."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
forward = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = next(iter(DataLoader(TensorDataset(torch.randn(12, 8), torch.randn(12, 1)), batch_size=12)))
for step in range(4):
    opt.zero_grad()
    nn.functional.mse_loss(forward(x), y).backward()
    opt.step()
test_x = torch.randn(5, 8)
print("prediction", forward(test_x).argmax(0).item())
