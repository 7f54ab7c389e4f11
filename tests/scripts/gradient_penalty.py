"""A WGAN-GP critic's training, small: each step takes the gradient of the critic's output with
respect to a mix of real and fake samples with create_graph=True (the gradient penalty), then
calls backward through it. Under compiled autograd both are captured: the penalty's
`autograd.grad`, and the loss's backward, which differentiates the penalty's compiled graph (a
CompiledFunctionBackward node). The data's 40 rows in batches of 16 end each epoch with 8: the
penalty's graph is captured again for the new sizes, and the loss's backward with it."""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    data = torch.randn(args.rows, 8)
    for epoch in range(args.epochs):
        for start in range(0, args.rows, 16):
            real = data[start:start + 16]
            fake = torch.randn_like(real)
            alpha = torch.rand(real.size(0), 1)
            mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            out = critic(mixed)
            grads = torch.autograd.grad(out, mixed, grad_outputs=torch.ones_like(out), create_graph=True)[0]
            penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
            loss = -critic(real).mean() + critic(fake).mean() + 10 * penalty
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
