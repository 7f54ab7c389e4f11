"""Lightning's shape without Lightning: training with an evaluation under torch.no_grad() after each
epoch (as the validation inside Trainer.fit() runs), then a final evaluation under
torch.inference_mode() (as Trainer.validate() and test() run). Dynamo recompiles the forward once
for the grad mode, then once more for inference mode: its tensors carry no autograd keys, and
Dynamo guards each tensor's dispatch keys.

    python no_grad_then_inference.py
"""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
held_out = torch.randn(8, 16)
for epoch in range(2):
    for i in range(3):
        loss = nn.functional.mse_loss(cmodel(torch.randn(8, 16)), torch.randn(8, 1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        print(f"epoch {epoch}: held-out {cmodel(held_out).pow(2).mean().item():.4f}")
with torch.inference_mode():
    print(f"test: {cmodel(held_out).pow(2).mean().item():.4f}")
