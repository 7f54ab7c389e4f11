"""Training with a Dropout, and two evaluations after each epoch of the same compiled model: one
switched to eval() with grad still on (a validation loss computed without no_grad), one in a
function decorated with @torch.inference_mode() that switches the model to eval() itself. Dynamo
recompiles the forward once for each: on the Dropout's `training` flag, then on the grad mode
(the compile made under inference mode). Both graphs are then cached.

    python train_eval_modes.py
"""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@torch.inference_mode()
def evaluate(held_out):
    model.eval()
    out = cmodel(held_out)
    model.train()
    return out.pow(2).mean()


for epoch in range(3):
    for i in range(4):
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        loss = nn.functional.mse_loss(cmodel(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    val = nn.functional.mse_loss(cmodel(x), y)
    model.train()
    print(f"epoch {epoch}: validation {val.item():.4f}, held-out {evaluate(torch.randn(8, 16)).item():.4f}")
