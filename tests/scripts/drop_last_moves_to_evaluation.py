"""pytorch/examples' vae in small: a compiled model trained on a DataLoader whose last batch is
smaller (40 samples by 16: 16, 16, 8), evaluated under no_grad on one whose last batch is smaller too
(24 by 16: 16, 8). Trained as written, the training's last batch makes dim 0 dynamic (0/1) and the
evaluation's graph (0/2, grad off) is dynamic too, so its own last batch compiles nothing. With
drop_last=True on the training loader the evaluation compiles for 16 (static) and recompiles for its
last batch of 8: the fix removes the training's recompiles and brings the evaluation's."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1)), backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
train_loader = DataLoader(TensorDataset(torch.randn(40, 6), torch.randn(40, 1)), batch_size=16)
test_loader = DataLoader(TensorDataset(torch.randn(24, 6), torch.randn(24, 1)), batch_size=16)
for epoch in range(2):
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        test_loss = sum(float(nn.functional.mse_loss(model(x), y)) for x, y in test_loader)
    print(f"epoch {epoch}: test loss {test_loss:.4f}")
