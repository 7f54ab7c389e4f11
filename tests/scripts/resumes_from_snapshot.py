"""A job that resumes from its own snapshot, as pytorch/examples' DDP tutorial does: 4 epochs of
2 steps, snapshot.pt saved after epochs 0 and 2 in the working directory, and on start resumed
from it when it exists (so a second run starts at epoch 3). `--save-last`: a snapshot after every
epoch, the last included, as pytorch/examples' minGPT-ddp (save_every: 1) saves: a second run
resumes at the end and trains no step."""

import os
import sys

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start = 0
if os.path.exists("snapshot.pt"):
    snapshot = torch.load("snapshot.pt")
    model.load_state_dict(snapshot["model"])
    start = snapshot["epoch"] + 1
    print(f"resuming from epoch {start}")
for epoch in range(start, 4):
    for _ in range(2):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    if epoch % 2 == 0 or "--save-last" in sys.argv[1:]:
        torch.save({"model": model.state_dict(), "epoch": epoch}, "snapshot.pt")
print("done")
