"""Starts three Python children: one cagtool can follow (it inherits the environment; it imports
torch, sets the compiled-autograd flag and prints what it reads back, but trains nothing, so it
leaves no record) and two it cannot (an env= without PYTHONPATH, and python -I)."""

import os
import subprocess
import sys

FLAG = "import torch; torch._dynamo.config.compiled_autograd = True; print('flag', torch._dynamo.config.compiled_autograd, flush=True)"
subprocess.run([sys.executable, "-c", FLAG], check=True)
subprocess.run([sys.executable, "-c", "pass"], env={"PATH": os.environ.get("PATH", "")}, check=True)
subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
