"""An eager model trained for 2 epochs over a DataLoader of 20 rows in batches of 8: each epoch ends
with a batch of 4, between full ones (pytorch/examples' vae, siamese and mnist_rnn have this shape)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(20, 8), torch.randn(20, 1)), batch_size=8)
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
