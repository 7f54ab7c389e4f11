"""A seeded MLP with dropout, compiled with the backend given (default inductor), SGD for a few
steps: compiled code draws dropout masks from its own generator unless fallback_random is set.
`--unseeded-input`: the input is shifted by the process's id, which no seed fixes (each process
computes on other inputs, as with Python's hash randomization). Not by a random draw: two draws of
[0, 1) close enough made two processes' losses agree (a CI run's parity test read "comparable")."""

import argparse
import os

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--unseeded-input", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 1))
    compiled = torch.compile(model, backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, target = torch.randn(32, 16), torch.randn(32, 1)
    if args.unseeded_input:
        x = x + os.getpid() % 100 / 10  # two processes started in turn have ids a few apart: inputs 0.1 or more apart
    for step in range(args.steps):
        opt.zero_grad()
        loss = F.mse_loss(compiled(x), target)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
