"""Starts `python -c CHILD` three times at once: it trains two steps, then ends normally, with
sys.exit(3), or by raising. Prints each child's return code."""

import subprocess
import sys

CHILD = """
import sys, torch
model = torch.nn.Linear(3, 1)
for _ in range(2):
    model(torch.randn(2, 3)).sum().backward()
if sys.argv[1] == "exit3":
    sys.exit(3)
if sys.argv[1] == "raise":
    raise ValueError("boom")
"""

# Started together (each imports torch: seconds apart), reported in the order started.
children = {how: subprocess.Popen([sys.executable, "-c", CHILD, how], stderr=subprocess.DEVNULL) for how in ("ok", "exit3", "raise")}
for how, child in children.items():
    print(how, child.wait(), flush=True)
