"""Starts Python children as a launcher may. One cagtool can follow that trains nothing (it
inherits the environment; it imports torch, sets the compiled-autograd flag and prints what it
reads back, so it leaves no record); two it cannot follow (an env= without PYTHONPATH, and
python -I); then `python -c CHILD` three times at once, followed: each trains two steps, then ends
normally, with sys.exit(3), or by raising. Prints each trainer's return code."""

import os
import subprocess
import sys

FLAG = "import torch; torch._dynamo.config.compiled_autograd = True; print('flag', torch._dynamo.config.compiled_autograd, flush=True)"
subprocess.run([sys.executable, "-c", FLAG], check=True)
subprocess.run([sys.executable, "-c", "pass"], env={"PATH": os.environ.get("PATH", "")}, check=True)
subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)

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
