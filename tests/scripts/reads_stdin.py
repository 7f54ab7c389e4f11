"""Reads all of stdin, then trains one step: each mode must see the same bytes."""

import hashlib
import sys

import torch

data = sys.stdin.buffer.read()
torch.nn.Linear(2, 2)(torch.ones(1, 2)).sum().backward()
lines = data.count(b"\n")
print(f"LINES {lines} {hashlib.sha1(data).hexdigest()[:12]}", flush=True)
