"""Trains 3 steps, forks a child that trains 5 steps and leaves with os._exit(0) (the way a fork
ends), waits for it, trains 4 more steps, then leaves with os._exit(CODE) (argv[1]), as some
launchers end a job to skip a slow teardown. Prints torch's own counters first."""

import os
import sys

import torch


def train(steps: int) -> None:
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


train(3)
pid = os.fork()
if pid == 0:
    train(5)
    print("child done", flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
train(4)
print(f"parent done, child exit {os.waitstatus_to_exitcode(status)}", flush=True)
os._exit(int(sys.argv[1]))
