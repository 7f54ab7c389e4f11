"""Layer-wise training, as pytorch/examples' mnist_forward_forward does it: the layers are kept in
a plain list (no parent module), each with its own optimizer, and trained in turn, the second on
the first's detached outputs: a backward of other sizes from the second layer's first step on
(compiled autograd recaptures there, in the ca mode only). Both optimizers stay alive to the end."""

import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)  # each layer's: more than a critic's few (boundaries.py)
args = parser.parse_args()

torch.manual_seed(0)
layers = [nn.Linear(12, 8), nn.Linear(8, 6)]
optimizers = [torch.optim.Adam(layer.parameters(), lr=0.01) for layer in layers]
x = torch.randn(16, 12)
h = x
for layer, opt in zip(layers, optimizers):
    for _ in range(args.steps):
        loss = torch.relu(layer(h)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    h = torch.relu(layer(h)).detach()
print("trained", len(layers), "layers", round(float(loss), 6))
