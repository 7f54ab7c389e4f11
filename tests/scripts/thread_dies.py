"""A worker thread raises (its shard is bad) while the main thread trains: python prints the
thread's traceback and the process goes on and exits 0. Prints how many steps the main thread made
(argv[1], default 3)."""

import sys
import threading

import torch


def load_shard() -> None:
    raise ValueError("bad shard 3")


model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
worker = threading.Thread(target=load_shard, name="loader")
worker.start()
worker.join()
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for _ in range(steps):
    opt.zero_grad()
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
print(f"steps {steps}", flush=True)
