"""Gradient accumulation: 4 micro-batches (4 backward calls) per optimizer step, 3 steps.

cagtool counts steps as optimizer steps: this run has 3 steps with 4 backward calls each, and a
step's time covers all four forwards and backwards and the optimizer.
"""

import argparse

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--backend", default="eager", help="torch.compile backend for the model")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    compiled = torch.compile(model, backend=args.backend)
    data = torch.randn(args.steps, args.accum, 8, 16)
    target = data.sum(-1, keepdim=True)

    for step in range(args.steps):
        opt.zero_grad()
        total = 0.0
        for micro in range(args.accum):
            loss = F.mse_loss(compiled(data[step, micro]), target[step, micro]) / args.accum
            loss.backward()
            total += loss.item()
        opt.step()
        print(f"step {step}  loss {total:.4f}")


if __name__ == "__main__":
    main()
