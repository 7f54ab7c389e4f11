"""A graph break inside a loop of a library helper: torch logs it twice per compile (Dynamo
restarts the frame's analysis after the loop break) but counts it once
(counters["graph_break"] == 1 where the structured log holds 2 records)."""

import torch


def library_normalize(x):  # stands in for library code Dynamo cannot trace in one piece
    for _ in range(2):
        x = x / (x.norm() + 1)
        torch._dynamo.graph_break()
    return x


@torch.compile(backend="eager")
def model(x, w):
    return library_normalize(x @ w).sum()


w = torch.randn(4, 4, requires_grad=True)
for step in range(3):
    loss = model(torch.randn(2, 4), w)
    loss.backward()
