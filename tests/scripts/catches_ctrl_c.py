"""Handles Ctrl-C itself: catches the first KeyboardInterrupt, tidies up for 3 s and exits 0.
Under python a terminal's Ctrl-C is one SIGINT; under cagtool it must be one too."""

import time

import torch

model = torch.nn.Linear(2, 2)
step = 0
try:
    while True:
        model(torch.ones(1, 2)).sum().backward()
        step += 1
        if step == 2:
            print("READY", flush=True)
        time.sleep(0.01)
except KeyboardInterrupt:
    print("CAUGHT", flush=True)
try:
    time.sleep(3)
    print("CLEAN EXIT", flush=True)
except KeyboardInterrupt:
    print("SECOND INTERRUPT", flush=True)
    raise
