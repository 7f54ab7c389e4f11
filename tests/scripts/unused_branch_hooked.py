"""DDP's shape with find_unused_parameters=True, in one process: a post-accumulate-grad hook on
every parameter (as DDP registers its all-reduce hook), a forward through `*inputs` (as DDP's
`forward(*inputs)` passes the user's arguments) and an auxiliary head used on even steps only.
On odd steps the head's parameters get no gradient, so compiled autograd's graph holds neither
their AccumulateGrad nodes nor their hooks: the backward reached fewer parameters, no hook was
removed. The bool is `inputs[1]` to Dynamo."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.aux = nn.Linear(32, 4)

    def forward(self, x, use_aux):
        h = self.body(x)
        out = self.head(h)
        if use_aux:
            out = out + self.aux(h)
        return out


torch.manual_seed(0)
model = Net()


def scale(param):  # in place on the gradient, as DDP's all-reduce is
    param.grad.mul_(1.0)


for p in model.parameters():
    p.register_post_accumulate_grad_hook(scale)


@torch.compile(backend="eager")
def forward(*inputs):
    return model(*inputs)


opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    loss = forward(torch.randn(8, 16), step % 2 == 0).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
