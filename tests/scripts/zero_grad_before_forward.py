"""An MLP trained with zero_grad() (set_to_none) before each forward: every .grad (4 x 4 MiB) is freed
between the heap reading at the previous step's end and the next backward's entry, while the
forward holds its activations (4 x 1 MiB in float32, 256 x 1024) for the backward."""

import torch

torch.manual_seed(0)
layers = [torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)]
model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024)
for _ in range(8):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
