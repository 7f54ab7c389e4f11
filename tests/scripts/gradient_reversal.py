"""Domain-adversarial training (DANN) as public repositories write it: a gradient reversal layer, a
custom autograd Function that keeps its annealed lambda on `ctx` (a new float every step), applied
outside the compiled feature extractor. Under compiled autograd Dynamo compiles the Function's
backward inside the CA graph, guards the first lambda (`hooks[0].lambd == 0.0`), recompiles once
with it as an input, and every later value reuses that graph.

    python gradient_reversal.py
"""

import math

import torch
from torch import nn
from torch.autograd import Function

torch.manual_seed(0)


class GradReverse(Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd, None


features = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.ReLU()), backend="eager")
label_head, domain_head = nn.Linear(32, 4), nn.Linear(32, 2)
params = [*features.parameters(), *label_head.parameters(), *domain_head.parameters()]
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
domains = torch.cat([torch.zeros(8, dtype=torch.long), torch.ones(8, dtype=torch.long)])

steps = 8
for step in range(steps):
    lambd = 2.0 / (1.0 + math.exp(-10 * step / steps)) - 1
    xs, ys, xt = torch.randn(8, 16), torch.randint(0, 4, (8,)), torch.randn(8, 16)
    fs, ft = features(xs), features(xt)
    loss = nn.functional.cross_entropy(label_head(fs), ys)
    loss = loss + nn.functional.cross_entropy(domain_head(GradReverse.apply(torch.cat([fs, ft]), lambd)), domains)
    opt.zero_grad()
    loss.backward()
    opt.step()
