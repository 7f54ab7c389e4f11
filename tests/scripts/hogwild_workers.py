"""Hogwild training as pytorch/examples' mnist_hogwild does it: the parent makes a model, puts its
parameters in shared memory (`model.share_memory()`), and starts two torch.multiprocessing
workers (fork: no second torch import) that each train it with their own SGD, seeded by their
number; the parent trains nothing itself and evaluates the model at the end. With `--private` the
parameters stay private: each worker trains its own copy, and every run computes the same losses.
Each worker prints its number and its last loss."""

import argparse
import sys

import torch
import torch.multiprocessing as mp
import torch.nn as nn


def train(number: int, model: nn.Module, steps: int) -> None:
    torch.manual_seed(1 + number)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    for _ in range(steps):
        opt.zero_grad()
        x = torch.randn(16, 8)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        loss.backward()
        opt.step()
    sys.stdout.write(f"worker {number} loss {loss.item():.6f}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--private", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    if not args.private:
        model.share_memory()
    workers = [mp.get_context("fork").Process(target=train, args=(n, model, args.steps)) for n in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with torch.no_grad():
        print("eval", round(float(model(torch.ones(1, 8))), 6))
