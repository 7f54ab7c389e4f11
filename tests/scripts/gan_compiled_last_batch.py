"""dcgan's training step with both networks compiled: the discriminator on real data (no grad to
its input), on the generator's detached output, then on the generator's output (its input
requires grad: Dynamo compiles the discriminator again for it), batches of 8, 8 and a last one of
3, two epochs. On the last batch the discriminator's real call fails the entry made for the
generator's output on requires_grad and the entry made for real data on its size: the size is the
call's own change, as for the generator's call after it."""

import torch
from torch import nn



class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, input):
        return self.main(input)


torch.manual_seed(0)
gen_model, disc_model = Generator(), Discriminator()
gen = torch.compile(gen_model, backend="aot_eager")
disc = torch.compile(disc_model, backend="aot_eager")
opt_g = torch.optim.Adam(gen_model.parameters(), lr=0.01)
opt_d = torch.optim.Adam(disc_model.parameters(), lr=0.01)
batches = [torch.randn(8, 4), torch.randn(8, 4), torch.randn(3, 4)]
for epoch in range(2):
    for real in batches:
        disc_model.zero_grad()
        disc(real).mean().backward()  # errD_real
        fake = gen(torch.randn(real.shape[0], 2))
        disc(fake.detach()).mean().backward()  # errD_fake
        opt_d.step()
        gen_model.zero_grad()
        disc(fake).mean().backward()  # errG
        opt_g.step()
print("trained 6 steps")
