"""A reshape of a transposed tensor (as an attention layer's heads are), over batches of 4, 4 and a
last one of 1 example, two epochs: with batch 1 the transposed input is contiguous, so reshape()
views it (ReshapeAliasBackward0) where it copied it before (CloneBackward0 + UnsafeViewBackward0):
the backward's structure changes at the last batch (an HF Trainer's BERT on 21 examples in 4s)."""

import torch

torch.manual_seed(0)
layer = torch.nn.Linear(6, 6)
opt = torch.optim.SGD(layer.parameters(), lr=0.01)
batches = [torch.randn(4, 3, 6), torch.randn(4, 3, 6), torch.randn(1, 3, 6)]
for epoch in range(2):
    for x in batches:
        heads = layer(x).transpose(0, 1)  # (3, batch, 6): not contiguous unless batch is 1
        loss = heads.reshape(3, -1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("trained 6 steps")
