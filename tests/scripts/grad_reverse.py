"""Domain-adversarial training (DANN): a gradient reversal layer, a custom autograd.Function whose
backward negates and scales the gradient by a weight that ramps up over training. The model is
compiled with backend="eager", which runs the Function through torch's autograd_function_apply: a
new Function class at every call, so compiled autograd captures every backward anew.

    python grad_reverse.py            # the Function defined once, the model compiled (eager backend)
    python grad_reverse.py --inner    # the Function defined inside forward, the model not compiled
    python grad_reverse.py --outside  # the Function defined once, applied outside the compiled feature extractor

Applied outside compiled code, the Function runs eagerly; under compiled autograd Dynamo compiles its
backward inside the CA graph, guards the first weight (`hooks[0].weight == 0.0`), recompiles once
with it as an input, and every later value reuses that graph.
"""

import math
import sys

import torch
import torch.nn as nn

INNER = "--inner" in sys.argv
OUTSIDE = "--outside" in sys.argv


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.weight, None


def reverse(x, weight):
    if not INNER:
        return GradReverse.apply(x, weight)

    class Reverse(torch.autograd.Function):  # a new class at every call
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output.neg() * weight

    return Reverse.apply(x)


class DANN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.label = nn.Linear(32, 4)
        self.domain = nn.Linear(32, 2)

    def forward(self, x, weight):
        f = self.features(x)
        return self.label(f), self.domain(reverse(f, weight))


torch.manual_seed(0)
model = DANN()
if OUTSIDE:
    model.features = torch.compile(model.features, backend="eager")
run = model if INNER or OUTSIDE else torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 8
for step in range(steps):
    weight = 2.0 / (1.0 + math.exp(-10 * step / steps)) - 1
    x, y, d = torch.randn(8, 16), torch.randint(0, 4, (8,)), torch.randint(0, 2, (8,))
    out, domain = run(x, weight)
    loss = nn.functional.cross_entropy(out, y) + nn.functional.cross_entropy(domain, d)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")
