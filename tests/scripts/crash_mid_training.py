"""Trains steps 0-2, then raises in the forward of step 3 (the 4th)."""
import torch

model = torch.nn.Linear(4, 4)
for step in range(6):
    if step == 3:
        raise RuntimeError("boom at step 3")
    model(torch.randn(2, 4)).sum().backward()
