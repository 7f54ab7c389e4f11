"""Gradient accumulation over 2 micro-batches that runs across epochs (as DeepSpeed's engine counts
them): 40 rows in micro-batches of 16, so each epoch's last is 8 rows, and an evaluation of the
compiled model under torch.no_grad() after each epoch. One optimizer step holds the 8-row
micro-batch, the evaluation, and the next epoch's first micro-batch: under compiled autograd the
backward of the forward recompiled for 8 rows is captured with .grad None, then again accumulating
into it (its .grad warm-up), with the evaluation's grad-mode recompile between the two.

    python accumulate_across_evaluation.py
"""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data, targets = torch.randn(40, 8), torch.randn(40, 1)
micro = 0
for epoch in range(2):
    for start in range(0, 40, 16):
        loss = nn.functional.mse_loss(compiled(data[start:start + 16]), targets[start:start + 16]) / 2
        loss.backward()
        micro += 1
        if micro % 2 == 0:
            opt.step()
            opt.zero_grad()
    with torch.no_grad():
        compiled(data[:16])
