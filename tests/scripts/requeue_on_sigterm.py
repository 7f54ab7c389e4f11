"""A training framework's SLURM-requeue handler: on SIGTERM it notes the requeue and chains to the
handler it replaced, calling it only if it is callable (SIG_DFL is not), as such handlers do;
training then goes on to its end. Under python the SIGTERM does not stop the job: exit 0."""

import signal
import time

import torch

previous = signal.getsignal(signal.SIGTERM)
got: list[int] = []


def requeue(signum, frame):
    got.append(signum)
    print(f"REQUEUE previous={previous!r}", flush=True)
    if callable(previous):
        previous(signum, frame)


signal.signal(signal.SIGTERM, requeue)
model = torch.nn.Linear(2, 2)
step = 0
while not got:
    model(torch.ones(1, 2)).sum().backward()
    step += 1
    if step == 2:
        print("READY", flush=True)
    time.sleep(0.01)
for _ in range(3):
    model(torch.ones(1, 2)).sum().backward()
print("DONE", flush=True)
