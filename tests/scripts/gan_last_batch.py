"""A GAN's three backward calls a step, as dcgan makes them: the discriminator on real data, on
fake data (the same autograd nodes; the second call accumulates into the .grad the first wrote,
another cache entry), then the generator through the discriminator. Batches of 8, 8 and a last
one of 3, two epochs: step 0 captures a graph per call (!0, !1, !2), the last batch recaptures
each with dynamic sizes (!3, !4, !5), each replacing the graph of its own call."""

import torch
from torch import nn

torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
disc = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
batches = [torch.randn(8, 4), torch.randn(8, 4), torch.randn(3, 4)]
for epoch in range(2):
    for real in batches:
        fake = gen(torch.randn(real.shape[0], 2))
        opt_d.zero_grad()
        disc(real).mean().backward()  # errD_real
        disc(fake.detach()).mean().backward()  # errD_fake
        opt_d.step()
        opt_g.zero_grad()
        disc(fake).mean().backward()  # errG
        opt_g.step()
print("trained 6 steps")
