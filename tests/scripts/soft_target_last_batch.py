"""A classifier trained on soft targets (mixup's or CutMix's probabilities, as torchvision's
classification reference makes them): CrossEntropyLoss over probabilities ends in DivBackward1, which
saves the batch size as a number. 45 examples in batches of 8: the last batch has 5, and compiled
autograd misses its cache on that number (torch names it a new DivBackward1), the graph's nodes the
same. Two epochs."""

import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(45, 16)
y = torch.softmax(torch.randn(45, 4), 1)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
for epoch in range(2):
    for xb, yb in loader:
        loss = criterion(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
