"""Starts three Python children: one cagtool can follow (it inherits the environment; it imports
torch but trains nothing, so it leaves no record) and two it cannot (an env= without
PYTHONPATH, and python -I)."""

import os
import subprocess
import sys

subprocess.run([sys.executable, "-c", "import torch"], check=True)
subprocess.run([sys.executable, "-c", "pass"], env={"PATH": os.environ.get("PATH", "")}, check=True)
subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
