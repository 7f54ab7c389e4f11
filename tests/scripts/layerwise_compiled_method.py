"""pytorch/examples' mnist_forward_forward, small: each layer an nn.Linear subclass whose
`forward` is compiled (`@torch.compile` on the method: one code object for every instance),
trained one layer after the other with its own optimizer (12 steps each: past the 10 after
which the step count stops waiting for an optimizer that does not step, so each is a step), the
next layer on the previous one's detached output; then a prediction on a smaller batch with grad on, through every layer. The
second layer is another instance with a weight of other sizes: its first call recompiles the
method whatever input it gets, which no dimension marked dynamic removes."""

import torch
from torch import nn


class Layer(nn.Linear):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    @torch.compile(backend="aot_eager")
    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train_layer(self, x_pos, x_neg, steps: int):
        for _ in range(steps):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(torch.exp(torch.cat([-g_pos + 2.0, g_neg - 2.0]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


torch.manual_seed(0)
layers = [Layer(12, 8), Layer(8, 8)]
h_pos, h_neg = torch.randn(16, 12), torch.randn(16, 12)
for layer in layers:
    h_pos, h_neg = layer.train_layer(h_pos, h_neg, steps=12)
h = torch.randn(5, 12)
for layer in layers:
    h = layer(h)  # the prediction: another batch, grad on
print("goodness", round(float(h.detach().pow(2).mean()), 4))
