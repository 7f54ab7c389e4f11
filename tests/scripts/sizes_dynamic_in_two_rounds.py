"""Sizes become dynamic in two rounds: the batch first, then the features (already dynamic sizes
count in torch's "total of M", not in its N)."""
import torch

torch._dynamo.config.compiled_autograd = True
w = torch.randn(4, 4, requires_grad=True)
for batch, feat in [(2, 4), (2, 4), (3, 4), (3, 4), (3, 6), (3, 6)]:
    x = torch.randn(batch, feat)
    v = torch.randn(feat, 4, requires_grad=True)
    loss = (x @ v @ w).sum()
    torch.compile(lambda: loss.backward(), backend="eager")()
