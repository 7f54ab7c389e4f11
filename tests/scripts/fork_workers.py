"""Two multiprocessing.Process children started with fork (or the start method given as the
first argument), each training a tiny model; each prints its pid and torch's compiled-autograd
capture count as one JSON line."""

import json
import multiprocessing as mp
import os
import sys

import torch
import torch.nn as nn


def work(steps: int) -> None:
    torch.manual_seed(os.getpid() % 7)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    from torch._dynamo.utils import counters

    sys.stdout.write(json.dumps({"pid": os.getpid(), "ca_captures": counters["compiled_autograd"]["captures"]}) + "\n")  # one write: the lines of two processes must not interleave
    sys.stdout.flush()


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1] if len(sys.argv) > 1 else "fork")
    procs = [ctx.Process(target=work, args=(3,)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    raise SystemExit(max(p.exitcode for p in procs))
