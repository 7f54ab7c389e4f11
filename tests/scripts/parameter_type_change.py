"""A regulariser over a layer's weight, computed by a compiled function: on the weight's values
(`detach()`, a plain Tensor) for the first steps, then on the Parameter itself. Dynamo guards each
tensor input's exact type: one recompile at step 3."""
import torch
import torch.nn as nn

torch.manual_seed(0)
lin = nn.Linear(8, 8)


@torch.compile(backend="eager")
def scaled_norm(t):
    return (t * 2).norm()


opt = torch.optim.SGD(lin.parameters(), lr=0.1)
for step in range(5):
    loss = lin(torch.randn(4, 8)).pow(2).mean()
    w = lin.weight.detach() if step < 3 else lin.weight
    loss = loss + 0.01 * scaled_norm(w)
    loss.backward()
    opt.step()
    opt.zero_grad()
