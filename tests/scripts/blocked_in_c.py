"""Trains two steps, then blocks in a C call that no signal interrupts (glibc's sigwait restarts
itself on EINTR, so Python never gets control back to run a handler of its own). Under python
SIGTERM, at its default action, ends the process at once."""

import signal

import torch

model = torch.nn.Linear(2, 2)
for _ in range(2):
    model(torch.ones(1, 2)).sum().backward()
print(f"READY {signal.getsignal(signal.SIGTERM)!r}", flush=True)
signal.sigwait({signal.SIGUSR1})
print("UNBLOCKED", flush=True)
