"""Seeded training of an embedding with sparse gradients (nn.Embedding(sparse=True), its own
SGD) and a dense head, each top-level module with its own optimizer: both
parameters named "weight" by their module path."""

import torch

torch.manual_seed(0)
emb = torch.nn.Embedding(16, 4, sparse=True)
head = torch.nn.Linear(4, 1)
opts = [torch.optim.SGD(emb.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
for step in range(4):
    idx = torch.randint(0, 16, (6,))
    for opt in opts:
        opt.zero_grad()
    loss = head(emb(idx)).pow(2).mean()
    loss.backward()
    for opt in opts:
        opt.step()
