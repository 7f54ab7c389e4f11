"""Trains until stopped, with a worker process of its own (not Python, so never followed):
prints READY <worker pid> after two steps, for tests that check the whole job stops."""

import subprocess

import torch

worker = subprocess.Popen(["sleep", "600"])
model = torch.nn.Linear(4, 4)
step = 0
while True:
    model(torch.randn(2, 4)).sum().backward()
    step += 1
    if step == 2:
        print(f"READY {worker.pid}", flush=True)
