"""The children a job starts with multiprocessing, both start methods in one job: two
multiprocessing.Process children started with fork and one with spawn, each training a tiny
model; each prints its pid, its start method and torch's compiled-autograd capture count as one
JSON line. Then a plain `python -c` child (no torch) prints what the user's own sitecustomize set
(MARK, when a sitecustomize with one is on PYTHONPATH) and whether it was followed, as
`child: MARK FOLLOWED`. The parent trains nothing."""

import json
import multiprocessing as mp
import os
import subprocess
import sys

import torch
import torch.nn as nn


def work(steps: int, method: str) -> None:
    torch.manual_seed(os.getpid() % 7)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    from torch._dynamo.utils import counters

    line = {"pid": os.getpid(), "start_method": method, "ca_captures": counters["compiled_autograd"]["captures"]}
    sys.stdout.write(json.dumps(line) + "\n")  # one write: the lines of several processes must not interleave
    sys.stdout.flush()


if __name__ == "__main__":
    # The fork children first: forked from the parent as it is before any other child exists.
    procs = [mp.get_context(method).Process(target=work, args=(3, method)) for method in ("fork", "fork", "spawn")]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    child = "import os, sitecustomize; print(getattr(sitecustomize, 'MARK', None), 'CAGTOOL_FOLLOW' in os.environ)"
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
    print("child:", out.strip(), flush=True)
    raise SystemExit(max(p.exitcode for p in procs))
