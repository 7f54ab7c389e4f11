"""Two backward calls of the same nodes in each step (a GAN's discriminator on real, then on fake
data: dcgan's errD_real and errD_fake), over batches of 8, 8 and a last one of 3, two epochs: at
the last batch both calls miss on the same sizes; the second's earlier values are in the graph
captured before the first's dynamic one."""

import torch

torch.manual_seed(0)
disc = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(disc.parameters(), lr=0.01)
batches = [torch.randn(8, 4), torch.randn(8, 4), torch.randn(3, 4)]
for epoch in range(2):
    for x in batches:
        opt.zero_grad()
        disc(x).mean().backward()  # real
        disc(x * 0.5).mean().backward()  # fake
        opt.step()
print("trained 6 steps")
