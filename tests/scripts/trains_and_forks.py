"""Trains two steps, then forks one multiprocessing child that trains two steps of its own: one
job whose record has the mode process's manifest and a followed process's (procs/pid<PID>)."""

import multiprocessing as mp

import torch
import torch.nn as nn


def train(steps: int) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()


if __name__ == "__main__":
    train(2)
    child = mp.get_context("fork").Process(target=train, args=(2,))
    child.start()
    child.join()
    raise SystemExit(child.exitcode)
