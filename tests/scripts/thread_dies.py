"""A worker thread raises (its shard is bad) while the main thread trains: python prints the
thread's traceback and the process goes on and exits 0. Prints how many steps the main thread made."""

import threading

import torch


def load_shard() -> None:
    raise ValueError("bad shard 3")


model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
worker = threading.Thread(target=load_shard, name="loader")
worker.start()
worker.join()
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
print("steps 3", flush=True)
