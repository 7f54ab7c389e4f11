"""Trains 3 steps, then raises in the 4th forward."""
import torch

model = torch.nn.Linear(4, 4)
for step in range(6):
    if step == 3:
        raise RuntimeError("boom at step 4")
    model(torch.randn(2, 4)).sum().backward()
